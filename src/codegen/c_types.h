// C spellings shared by the C++ and GPU renderers: storage and compute types, float literals.
#pragma once

#include <string>

#include "ir/dtype.h"

namespace prism {

// The element type a buffer of dtype t is stored as; f16 may be spelled differently per dialect.
const char* StorageCType(DType t, const char* f16_storage = "uint16_t");
// Arithmetic happens in float for every float dtype (quantized included) and int32 otherwise.
const char* ComputeCType(DType t);
// A float literal that round-trips, with PRISM_INF / PRISM_NAN for the special values.
std::string FloatLiteral(double v);

}  // namespace prism
