// The reference interpreter: runs any graph on the CPU in double precision; ground truth for all.
#include "ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/error.h"

namespace prism {
namespace {

using Shape = std::vector<int64_t>;

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// Calls f(linear, multi_index) for every element of shape s in row-major order.
template <typename F>
void ForEachIndex(const Shape& s, F f) {
  int64_t n = Numel(s);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    f(lin, idx);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t Offset(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

}  // namespace

std::vector<HostTensor> Interpreter::Run(const std::map<std::string, HostTensor>& inputs,
                                         const SymbolBindings& syms) {
  SymbolBindings b = BindSymbols(g_, inputs, syms);
  int32_t n = g_.size();
  std::vector<std::vector<double>> vals(n);
  std::vector<Shape> shapes(n);
  for (NodeId id = 0; id < n; ++id) {
    const Node& nd = g_.node(id);
    Shape shape = EvalShape(nd.shape, b);
    for (int64_t d : shape)
      if (d < 0) throw Error("negative size evaluating " + g_.Describe(id));
    shapes[id] = shape;
    std::vector<double>& out = vals[id];
    out.assign(Numel(shape), 0.0);
    auto in = [&](int k) -> const std::vector<double>& { return vals[nd.inputs[k]]; };
    auto in_shape = [&](int k) -> const Shape& { return shapes[nd.inputs[k]]; };
    switch (nd.op) {
      case Op::Input: {
        const HostTensor& t = inputs.at(nd.name);
        for (int64_t i = 0; i < (int64_t)out.size(); ++i) out[i] = t.At(i);
        break;
      }
      case Op::Weight: {
        auto it = weights_.find(nd.name);
        if (it == weights_.end()) throw Error("weight '" + nd.name + "' was not bound");
        if (it->second.shape != shape)
          throw Error("weight '" + nd.name + "': bound shape " + it->second.ShapeString() +
                      ", graph expects " + ShapeStr(nd.shape));
        for (int64_t i = 0; i < (int64_t)out.size(); ++i) out[i] = it->second.At(i);
        break;
      }
      case Op::State: {
        auto& s = state_[nd.name];
        if (s.size() != out.size()) s.assign(out.size(), 0.0);
        out = s;
        break;
      }
      case Op::Constant: std::fill(out.begin(), out.end(), nd.scalar); break;
      case Op::Iota: {
        int64_t axis = nd.axes[0];
        ForEachIndex(shape,
                     [&](int64_t lin, const std::vector<int64_t>& idx) { out[lin] = (double)idx[axis]; });
        break;
      }
      case Op::Exp2:
      case Op::Log2:
      case Op::Sin:
      case Op::Sqrt:
      case Op::Recip:
        for (size_t i = 0; i < out.size(); ++i) out[i] = ApplyUnary(nd.op, in(0)[i]);
        break;
      case Op::Cast: out = in(0); break;  // rounding to the target type happens below
      case Op::Add:
      case Op::Mul:
      case Op::Mod:
      case Op::LessThan:
      case Op::Max:
        for (size_t i = 0; i < out.size(); ++i) out[i] = ApplyBinary(nd.op, in(0)[i], in(1)[i]);
        break;
      case Op::Where:
        for (size_t i = 0; i < out.size(); ++i) out[i] = in(0)[i] != 0 ? in(1)[i] : in(2)[i];
        break;
      case Op::SumReduce:
      case Op::MaxReduce: {
        bool is_max = nd.op == Op::MaxReduce;
        std::fill(out.begin(), out.end(), is_max ? -std::numeric_limits<double>::infinity() : 0.0);
        auto ost = Strides(shape);
        ForEachIndex(in_shape(0), [&](int64_t lin, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d) o += (shape[d] == 1 ? 0 : idx[d]) * ost[d];
          double v = in(0)[lin];
          if (is_max)
            out[o] = (std::isnan(v) || std::isnan(out[o])) ? NAN : std::max(out[o], v);
          else
            out[o] += v;
        });
        break;
      }
      case Op::Gather: {
        int64_t axis = nd.axes[0];
        const Shape& ss = in_shape(0);
        auto sst = Strides(ss);
        ForEachIndex(shape, [&](int64_t lin, const std::vector<int64_t>& idx) {
          std::vector<int64_t> src = idx;
          // Out-of-range indices clamp (the generated code does the same; callers validate ids).
          src[axis] = std::clamp((int64_t)in(1)[lin], int64_t{0}, ss[axis] - 1);
          out[lin] = in(0)[Offset(src, sst)];
        });
        break;
      }
      case Op::Reshape: out = in(0); break;
      case Op::Permute: {
        auto ist = Strides(in_shape(0));
        ForEachIndex(shape, [&](int64_t lin, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * ist[nd.axes[d]];
          out[lin] = in(0)[o];
        });
        break;
      }
      case Op::Expand: {
        const Shape& is = in_shape(0);
        auto ist = Strides(is);
        ForEachIndex(shape, [&](int64_t lin, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          for (size_t d = 0; d < idx.size(); ++d) o += (is[d] == 1 ? 0 : idx[d]) * ist[d];
          out[lin] = in(0)[o];
        });
        break;
      }
      case Op::Slice: {
        const Shape& is = in_shape(0);
        auto ist = Strides(is);
        size_t r = is.size();
        std::vector<int64_t> start(r), step(r);
        for (size_t d = 0; d < r; ++d) {
          start[d] = nd.args[d].Eval(b);
          step[d] = nd.args[r + d].Eval(b);
          if (shape[d] > 0 && (start[d] < 0 || start[d] + step[d] * (shape[d] - 1) >= is[d]))
            throw Error("Slice " + g_.Describe(id) + ": axis " + std::to_string(d) + " reads [" +
                        std::to_string(start[d]) + ", " +
                        std::to_string(start[d] + step[d] * (shape[d] - 1)) + "] of a size-" +
                        std::to_string(is[d]) + " axis");
        }
        ForEachIndex(shape, [&](int64_t lin, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          for (size_t d = 0; d < r; ++d) o += (start[d] + step[d] * idx[d]) * ist[d];
          out[lin] = in(0)[o];
        });
        break;
      }
      case Op::Pad: {
        const Shape& is = in_shape(0);
        auto ist = Strides(is);
        size_t r = is.size();
        ForEachIndex(shape, [&](int64_t lin, const std::vector<int64_t>& idx) {
          int64_t o = 0;
          for (size_t d = 0; d < r; ++d) {
            int64_t s = idx[d] - nd.args[d].Eval(b);
            if (s < 0 || s >= is[d]) return;
            o += s * ist[d];
          }
          out[lin] = in(0)[o];
        });
        break;
      }
      case Op::StateWrite: {
        int64_t axis = nd.axes[0], offset = nd.args[0].Eval(b);
        const Shape& vs = in_shape(1);
        if (offset < 0 || offset + vs[axis] > shape[axis])
          throw Error("StateWrite '" + nd.name + "': writing [" + std::to_string(offset) + ", " +
                      std::to_string(offset + vs[axis]) + ") past the state's size " +
                      std::to_string(shape[axis]) + " on axis " + std::to_string(axis));
        out = in(0);
        auto ost = Strides(shape);
        ForEachIndex(vs, [&](int64_t lin, const std::vector<int64_t>& idx) {
          std::vector<int64_t> dst = idx;
          dst[axis] += offset;
          out[Offset(dst, ost)] = RoundToDType(in(1)[lin], nd.dtype);
        });
        state_[nd.name] = out;
        break;
      }
      case Op::StateScatter: {
        out = in(0);
        const Shape& vs = in_shape(1);
        const int64_t row = Numel(vs) / std::max<int64_t>(vs[0], 1);
        for (int64_t i = 0; i < vs[0]; ++i) {
          const int64_t dst = std::clamp((int64_t)in(2)[i], int64_t{0}, shape[0] - 1);
          for (int64_t e = 0; e < row; ++e) out[dst * row + e] = RoundToDType(in(1)[i * row + e], nd.dtype);
        }
        state_[nd.name] = out;
        break;
      }
    }
    if (nd.op != Op::Weight && nd.op != Op::Input)
      for (double& v : out) v = RoundToDType(v, nd.dtype);
  }
  std::vector<HostTensor> results;
  for (NodeId o : g_.outputs()) {
    DType t = IsFloat(g_.node(o).dtype) ? DType::F32 : DType::I32;
    HostTensor r = HostTensor::Zeros(t, shapes[o]);
    for (int64_t i = 0; i < r.numel(); ++i) StoreFromDouble(r.data, t, i, vals[o][i]);
    results.push_back(std::move(r));
  }
  return results;
}

std::vector<double>& Interpreter::MutableStateValues(const std::string& name) {
  for (const Node& n : g_.nodes())
    if (n.op == Op::State && n.name == name) {
      auto& s = state_[name];
      const size_t size = (size_t)Product(n.shape).Eval({});
      if (s.size() != size) s.assign(size, 0.0);
      return s;
    }
  throw Error("state '" + name + "': the graph has no such state");
}

}  // namespace prism
