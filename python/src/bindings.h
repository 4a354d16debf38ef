// The native module's parts: each Bind* adds one area of Prism's API to the module.
#pragma once

#include <nanobind/nanobind.h>

namespace prism::py {

void BindModel(nanobind::module_& m);  // load, Model, Tokenizer, Generation, compile
void BindGraph(nanobind::module_& m);  // Expr, Graph, Tensor (the frontend), Program (a compiled graph)

}  // namespace prism::py
