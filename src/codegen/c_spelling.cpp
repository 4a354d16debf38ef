// C spellings every dialect of the C-style renderer shares: types, float literals, elementwise ops.
#include "codegen/c_spelling.h"

#include <cmath>

#include "ir/error.h"
#include "ir/text_stream.h"

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
  TextStream os;
  os.precision(9);
  os << std::scientific << (float)v << "f";
  return os.str();
}

namespace {

// A finite float literal as FloatLiteral spells it (not NaN).
bool IsNumberLiteral(const std::string& s) {
  return s.size() > 1 && s.back() == 'f' && s.find_first_not_of("0123456789.e+-f") == std::string::npos;
}

}  // namespace

std::string ScalarOpExpr(Op op, DType t, const std::vector<std::string>& a, const MathNames& m) {
  auto call = [](const char* fn, const std::string& x) { return std::string(fn) + "((float)(" + x + "))"; };
  const bool f = IsFloat(t);
  switch (op) {
    case Op::Exp2: return call(m.exp2, a[0]);
    case Op::Log2: return call(m.log2, a[0]);
    case Op::Sin: return call(m.sin, a[0]);
    case Op::Sqrt: return call(m.sqrt, a[0]);
    case Op::Recip: return "(1.0f / (float)(" + a[0] + "))";
    case Op::Cast:
      switch (t) {
        case DType::F32: return "((float)(" + a[0] + "))";
        case DType::F16: return "prism_rh((float)(" + a[0] + "))";
        case DType::BF16: return "prism_rbf((float)(" + a[0] + "))";
        case DType::Bool: return "((int32_t)((" + a[0] + ") != 0))";
        case DType::I8: return "((int32_t)(int8_t)(int32_t)(" + a[0] + "))";
        case DType::U8: return "((int32_t)(uint8_t)(int32_t)(" + a[0] + "))";
        default: return "((int32_t)(" + a[0] + "))";
      }
    case Op::Add: return "(" + a[0] + " + " + a[1] + ")";
    case Op::Mul: return "(" + a[0] + " * " + a[1] + ")";
    case Op::Mod:
      return f ? std::string(m.fmod) + "((float)(" + a[0] + "), (float)(" + a[1] + "))"
               : "(" + a[0] + " % " + a[1] + ")";
    case Op::LessThan: return "((int32_t)(" + a[0] + " < " + a[1] + "))";
    case Op::Max:  // against a number (ReLU's 0): a compare and a masked move, no NaN test
      if (f && IsNumberLiteral(a[1])) return "prism_maxc(" + a[0] + ", " + a[1] + ")";
      if (f && IsNumberLiteral(a[0])) return "prism_maxc(" + a[1] + ", " + a[0] + ")";
      return f ? "prism_maxf(" + a[0] + ", " + a[1] + ")"
               : "(" + a[0] + " > " + a[1] + " ? " + a[0] + " : " + a[1] + ")";
    case Op::Where:
      return "((" + a[0] + ") != 0 ? (" + ComputeCType(t) + ")(" + a[1] + ") : (" + ComputeCType(t) + ")(" +
             a[2] + "))";
    default: throw Error("renderer: unsupported elementwise op " + std::string(OpName(op)));
  }
}

}  // namespace prism
