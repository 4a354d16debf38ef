// C spellings every dialect of the C-style renderer shares: types, float literals, elementwise ops.
#pragma once

#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"

namespace prism {

// The element type a buffer of dtype t is stored as; f16 may be spelled differently per dialect.
const char* StorageCType(DType t, const char* f16_storage = "uint16_t");
// Arithmetic happens in float for every float dtype (quantized included) and int32 otherwise.
const char* ComputeCType(DType t);
// Names of the float math functions in a dialect (the GPU dialects call exp2f or exp2, C++ builtins).
struct MathNames {
  const char *exp2, *log2, *sin, *sqrt, *fmod;
};
// The expression for one elementwise primitive (unary, binary, Where, Cast) of the kernel IR,
// given its rendered operands; shared by every renderer. Throws for other ops.
std::string ScalarOpExpr(Op op, DType t, const std::vector<std::string>& a, const MathNames& m);

// A float literal that round-trips, with PRISM_INF / PRISM_NAN for the special values.
std::string FloatLiteral(double v);

}  // namespace prism
