// C spellings shared by the C++ and GPU renderers: storage and compute types, float literals.
#include "codegen/c_types.h"

#include <cmath>
#include <sstream>

namespace prism {

const char* StorageCType(DType t, const char* f16_storage) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F16: return f16_storage;
    case DType::BF16: return "uint16_t";
    case DType::I32: return "int32_t";
    case DType::I8: return "int8_t";
    default: return "uint8_t";  // u8, bool, quantized blocks
  }
}

const char* ComputeCType(DType t) { return IsFloat(t) ? "float" : "int32_t"; }

std::string FloatLiteral(double v) {
  if (std::isnan(v)) return "PRISM_NAN";
  if (std::isinf(v)) return v > 0 ? "PRISM_INF" : "(-PRISM_INF)";
  std::ostringstream os;
  os.precision(9);
  os << std::scientific << (float)v << "f";
  return os.str();
}

}  // namespace prism
