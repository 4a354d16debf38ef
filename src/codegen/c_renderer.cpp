// Renders the kernel IR's values, loads, stores, symbols and prelude in any of the C-style dialects.
#include "codegen/c_renderer.h"

#include "ir/text_stream.h"

namespace prism {
namespace {

// Integer index arithmetic (64-bit, flooring) and the NaN-propagating float max.
constexpr const char* kIndexHelpers =
    R"(${dev} int64_t prism_fdiv(int64_t a, int64_t b) { return a / b - (int64_t)((a % b != 0) & ((a ^ b) < 0)); }
${dev} int64_t prism_fmod(int64_t a, int64_t b) { int64_t r = a % b; return r + (b & -(int64_t)((r != 0) & ((r ^ b) < 0))); }
${dev} int64_t prism_min(int64_t a, int64_t b) { return a < b ? a : b; }
${dev} int64_t prism_max(int64_t a, int64_t b) { return a > b ? a : b; }
${dev} int64_t prism_clampi(int64_t v, int64_t hi) { return v < 0 ? 0 : (v >= hi ? hi - 1 : v); }
${dev} float prism_maxf(float a, float b) { return (a > b || a != a) ? a : b; }  // either NaN: NaN
${dev} float prism_maxc(float x, float c) { return c > x ? c : x; }  // c not NaN: x's NaN kept, no NaN test
)";

// Rounding through f16/bf16 (casts) and elements of GGUF Q8_0/Q4_0 blocks (32 per block, f16 scale).
constexpr const char* kRoundingAndBlocks =
    R"(${dev} float prism_rh(float f) { return prism_h2f(prism_f2h(f)); }
${dev} float prism_rbf(float f) { return prism_bf2f(prism_f2bf(f)); }
${dev} float prism_q8_0(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 34;
  return prism_h2f((uint16_t)(blk[0] | (blk[1] << 8))) * (float)(int8_t)blk[2 + (i & 31)];
}
${dev} float prism_q4_0(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 18;
  int j = (int)(i & 31);
  int q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
  return prism_h2f((uint16_t)(blk[0] | (blk[1] << 8))) * (float)(q - 8);
}
)";

// Elements of GGUF's other block formats, as ir/quant_formats.cpp defines them (byte offsets of
// its structs; f16 fields little-endian). Element j of a 32-value nibble block is the low nibble of
// byte j < 16, else the high nibble of byte j - 16.
constexpr const char* kOtherBlocks =
    R"(${dev} float prism_hf(${global}const uint8_t* p) { return prism_h2f((uint16_t)(p[0] | (p[1] << 8))); }
${dev} int prism_nib32(${global}const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }
${dev} int prism_qh32(${global}const uint8_t* qh, int j) { return ((qh[j >> 3] >> (j & 7)) & 1) << 4; }
${dev} float prism_q4_1(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 20;
  return (float)prism_nib32(blk + 4, (int)(i & 31)) * prism_hf(blk) + prism_hf(blk + 2);
}
${dev} float prism_q5_0(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 22;
  int j = (int)(i & 31);
  return (float)((prism_nib32(blk + 6, j) | prism_qh32(blk + 2, j)) - 16) * prism_hf(blk);
}
${dev} float prism_q5_1(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 24;
  int j = (int)(i & 31);
  return (float)(prism_nib32(blk + 8, j) | prism_qh32(blk + 4, j)) * prism_hf(blk) + prism_hf(blk + 2);
}
${dev} float prism_iq4_value(int q) {
  return (float)(q < 8 ? (q < 4 ? (q < 2 ? (q == 0 ? -127 : -104) : (q == 2 ? -83 : -65))
                                : (q < 6 ? (q == 4 ? -49 : -35) : (q == 6 ? -22 : -10)))
                       : (q < 12 ? (q < 10 ? (q == 8 ? 1 : 13) : (q == 10 ? 25 : 38))
                                 : (q < 14 ? (q == 12 ? 53 : 69) : (q == 14 ? 89 : 113))));
}
${dev} float prism_iq4_nl(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 5) * 18;
  return prism_hf(blk) * prism_iq4_value(prism_nib32(blk + 2, (int)(i & 31)));
}
${dev} float prism_q2_k(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 84;
  int j = (int)(i & 255), h = j >> 7, r = j & 127, s = r >> 5, g = (r & 31) >> 4, l = r & 15;
  int sc = blk[h * 8 + s * 2 + g], q = (blk[16 + h * 32 + g * 16 + l] >> (2 * s)) & 3;
  float dl = prism_hf(blk + 80) * (float)(sc & 15), ml = prism_hf(blk + 82) * (float)(sc >> 4);
  return dl * (float)q - ml;
}
${dev} float prism_q3_k(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 110;
  int j = (int)(i & 255), h = j >> 7, r = j & 127, s = r >> 5, g = (r & 31) >> 4, l = r & 15;
  int low = (blk[32 + h * 32 + g * 16 + l] >> (2 * s)) & 3;
  int high = (blk[g * 16 + l] >> (h * 4 + s)) & 1;
  ${global}const uint8_t* sc = blk + 96;
  int k = h * 8 + s * 2 + g;
  int scale = ((k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4)) | (((sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3) << 4)) - 32;
  return (prism_hf(blk + 108) * (float)scale) * (float)(low - (high ? 0 : 4));
}
${dev} void prism_scale_min_k4(${global}const uint8_t* q, int j, int* sc, int* mn) {
  if (j < 4) { *sc = q[j] & 63; *mn = q[j + 4] & 63; }
  else { *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4); *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}
${dev} int prism_nibk(${global}const uint8_t* qs, int j) {
  int v = qs[(j >> 6) * 32 + (j & 31)];
  return (j & 63) < 32 ? (v & 15) : (v >> 4);
}
${dev} float prism_q4_k(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 144;
  int j = (int)(i & 255), sc, mn;
  prism_scale_min_k4(blk + 4, j >> 5, &sc, &mn);
  float d1 = prism_hf(blk) * (float)sc, m1 = prism_hf(blk + 2) * (float)mn;
  return d1 * (float)prism_nibk(blk + 16, j) - m1;
}
${dev} float prism_q5_k(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 176;
  int j = (int)(i & 255), sc, mn;
  prism_scale_min_k4(blk + 4, j >> 5, &sc, &mn);
  float d1 = prism_hf(blk) * (float)sc, m1 = prism_hf(blk + 2) * (float)mn;
  int q = prism_nibk(blk + 48, j) + (((blk[16 + (j & 31)] >> (j >> 5)) & 1) << 4);
  return d1 * (float)q - m1;
}
${dev} float prism_q6_k(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 210;
  int j = (int)(i & 255), h = j >> 7, r = j & 127, g = r >> 5, l = r & 31;
  int v = blk[h * 64 + l + 32 * (g & 1)];
  int lo = g < 2 ? (v & 15) : (v >> 4), hi = (blk[128 + h * 32 + l] >> (2 * g)) & 3;
  float dl = prism_hf(blk + 208) * (float)(int8_t)blk[192 + h * 8 + (l >> 4) + 2 * g];
  return dl * (float)((lo | (hi << 4)) - 32);
}
${dev} float prism_iq4_xs(${global}const uint8_t* b, int64_t i) {
  ${global}const uint8_t* blk = b + (i >> 8) * 136;
  int j = (int)(i & 255), ib = j >> 5;
  int sh = blk[2] | (blk[3] << 8);
  int ls = ((blk[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
  return (prism_hf(blk) * (float)(ls - 32)) * prism_iq4_value(prism_nib32(blk + 8 + ib * 16, j & 31));
}
)";

}  // namespace

std::string FillPlaceholders(std::string text,
                             const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  return text;
}

std::string CPrelude(const CDialect& d) {
  TextStream os;
  os << d.banner << "\n";
  const char* names[] = {"int64_t", "int32_t", "int8_t", "uint8_t", "uint16_t", "uint32_t"};
  for (int i = 0; i < 6; ++i) os << "typedef " << d.int_types[i] << " " << names[i] << ";\n";
  os << d.defs << "#define PRISM_INF " << d.inf << "\n#define PRISM_NAN " << d.nan << "\n";
  const std::vector<std::pair<std::string, std::string>> fill = {{"${dev}", d.dev},
                                                                 {"${global}", d.global_helper}};
  os << FillPlaceholders(kIndexHelpers, fill) << d.float_helpers << FillPlaceholders(kRoundingAndBlocks, fill)
     << FillPlaceholders(kOtherBlocks, fill);
  return os.str();
}

std::function<std::string(const std::string&)> CKernelRenderer::SymFn(
    const std::vector<GatherBinding>* gathers, std::string* stmts, const std::string& ind) {
  return [this, gathers, stmts, ind](const std::string& name) -> std::string {
    if (gathers)
      for (const GatherBinding& gb : *gathers)
        if (gb.sym == name) {
          std::string local;
          std::string v = Value(gb.value, stmts ? stmts : &local, ind);
          return "prism_clampi((int64_t)(" + v + "), " + gb.limit.Render(SymFn()) + ")";
        }
    for (const std::string& s : p_.symbols)
      if (s == name) return "s_" + name;
    return name;  // loop variable
  };
}

std::string CKernelRenderer::Load(const KValue& v, std::string* stmts, const std::string& ind) {
  const std::string buf = BufferName(v.buffer);
  const std::string idx = v.index.Render(SymFn(&v.gathers, stmts, ind));
  switch (p_.buffers[v.buffer].dtype) {
    case DType::F16:
      if (d_.vload_half) return "vload_half((size_t)(" + idx + "), " + buf + ")";
      return "prism_h2f(" + buf + "[" + idx + "])";
    case DType::BF16: return "prism_bf2f(" + buf + "[" + idx + "])";
    case DType::Q8_0: return "prism_q8_0(" + buf + ", " + idx + ")";
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return "prism_" + std::string(DTypeName(p_.buffers[v.buffer].dtype)) + "(" + buf + ", " + idx + ")";
    case DType::I8:
    case DType::U8:
    case DType::Bool: return "((int32_t)" + buf + "[" + idx + "])";
    default: return buf + "[" + idx + "]";
  }
}

std::string CKernelRenderer::Store(int buffer, const std::string& idx, const std::string& value,
                                   DType vt) const {
  const std::string buf = BufferName(buffer), val = "(" + value + ")";
  const DType t = p_.buffers[buffer].dtype;
  switch (t) {
    case DType::F32: return buf + "[" + idx + "] = (float)" + val + ";";
    case DType::F16:
      if (d_.vload_half) return "vstore_half_rte((float)" + val + ", (size_t)(" + idx + "), " + buf + ");";
      return buf + "[" + idx + "] = prism_f2h((float)" + val + ");";
    case DType::BF16: return buf + "[" + idx + "] = prism_f2bf((float)" + val + ");";
    case DType::Bool: return buf + "[" + idx + "] = (uint8_t)(" + val + " != 0);";
    default:
      return buf + "[" + idx + "] = (" + StorageType(t) + ")" + (IsFloat(vt) ? "(int32_t)" : "") + val + ";";
  }
}

std::string CKernelRenderer::Value(const KValuePtr& vp, std::string* stmts, const std::string& ind) {
  const KValue& v = *vp;
  switch (v.kind) {
    case KValue::Kind::Load: return Load(v, stmts, ind);
    case KValue::Kind::Const:
      return IsFloat(v.dtype) ? FloatLiteral(v.constant)
                              : "((int32_t)" + std::to_string((int64_t)v.constant) + ")";
    case KValue::Kind::Index:
      return std::string("((") + ComputeCType(v.dtype) + ")(" +
             v.index.Render(SymFn(&v.gathers, stmts, ind)) + "))";
    case KValue::Kind::Guard: {
      std::string inner = Value(v.args[0], stmts, ind);
      return "((" + v.index.Render(SymFn(&v.gathers, stmts, ind)) + ") ? (" + inner + ") : (" +
             ComputeCType(v.dtype) + ")0)";
    }
    case KValue::Kind::Reduce: return Reduce(v, stmts, ind);
    case KValue::Kind::Op: {
      std::vector<std::string> a;
      for (const KValuePtr& x : v.args) a.push_back(Value(x, stmts, ind));
      return ScalarOpExpr(v.op, v.dtype, a, d_.math);
    }
  }
  return "";
}

std::string CKernelRenderer::Body(const KValue& reduce, std::string* stmts, const std::string& ind) {
  ++depth_;
  std::string body = Value(reduce.args[0], stmts, ind);
  --depth_;
  return body;
}

std::string CKernelRenderer::OpenLoops(const std::vector<std::string>& vars, const std::vector<Expr>& extents,
                                       std::string ind, std::ostream& os,
                                       const std::string& innermost_prefix) {
  for (size_t r = 0; r < vars.size(); ++r) {
    if (r + 1 == vars.size()) os << innermost_prefix;
    os << ind << "for (int64_t " << vars[r] << " = 0; " << vars[r] << " < " << extents[r].Render(SymFn())
       << "; ++" << vars[r] << ") {\n";
    ind += "  ";
  }
  return ind;
}

void CKernelRenderer::CloseLoops(size_t n, std::string ind, std::ostream& os) {
  while (n-- > 0) {
    ind.resize(ind.size() - 2);
    os << ind << "}\n";
  }
}

std::string CKernelRenderer::Init(const KValue& v) {
  if (v.op == Op::SumReduce) return "0";
  return IsFloat(v.dtype) ? "(-PRISM_INF)" : "(-2147483647 - 1)";
}

std::string CKernelRenderer::Combine(const KValue& v, const std::string& acc, const std::string& x) {
  if (v.op == Op::SumReduce) return acc + " += " + x + ";";
  if (IsFloat(v.dtype)) return acc + " = prism_maxf(" + acc + ", " + x + ");";
  return "{ int32_t x_ = " + x + "; " + acc + " = x_ > " + acc + " ? x_ : " + acc + "; }";
}

// acc = identity; for (r0 ...) for (r1 ...) { body's statements; acc = acc (+ or max) body; }
std::string CKernelRenderer::LoopReduce(const KValue& v, std::string* stmts, const std::string& ind) {
  const std::string acc = "acc" + NewAcc();
  const std::string in = ind + std::string(2 * v.rvars.size(), ' ');
  std::string body_stmts;
  const std::string body = Body(v, &body_stmts, in);
  std::string pragma;  // the body is a plain expression: the innermost loop may vectorize
  if (d_.sum_loop_pragma && v.op == Op::SumReduce && IsFloat(v.dtype) && body_stmts.empty())
    pragma = FillPlaceholders(d_.sum_loop_pragma, {{"${acc}", acc}}) + "\n";
  TextStream os;
  os << ind << ComputeCType(v.dtype) << " " << acc << " = " << Init(v) << ";\n";
  OpenLoops(v.rvars, v.rextents, ind, os, pragma);
  os << body_stmts << in << Combine(v, acc, body) << "\n";
  CloseLoops(v.rvars.size(), in, os);
  *stmts += os.str();
  return acc;
}

}  // namespace prism
