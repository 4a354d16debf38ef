// prism._prism: the native module under the Python package; prism::Error becomes prism.PrismError.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "ir/error.h"

NB_MODULE(_prism, m) {
  m.doc() = "Prism's native core (use the prism package, which wraps it)";
  static nanobind::exception<prism::Error> error(m, "PrismError", PyExc_ValueError);
  prism::py::BindModel(m);
  prism::py::BindGraph(m);
}
