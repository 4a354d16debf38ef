// The catalog of op graphs (every primitive, the high-level ops, the templates' shapes) that every
// registered device runs against the reference interpreter (device_ops_test.cpp).
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "frontend/nn.h"
#include "ir/host_tensor.h"

namespace prism::testing {

struct OpGraphCase {
  std::string name;
  std::function<void(Graph&)> build;
  std::vector<SymbolBindings> bindings;
  double atol = 1e-5, rtol = 1e-5;
  bool stateful = false;  // bindings are successive steps of one program: state carries over
};

inline std::vector<OpGraphCase> OpGraphCases() {
  using T = Tensor;
  auto N = [] { return Expr::Sym("n"); };
  auto S = [] { return Expr::Sym("seq"); };
  auto in = [](Graph& g, const std::string& name, std::vector<Expr> shape, DType t = DType::F32) {
    return T{&g, g.Input(name, t, std::move(shape))};
  };
  auto w = [](Graph& g, const std::string& name, std::vector<Expr> shape, DType t = DType::F32) {
    return T{&g, g.Weight(name, t, std::move(shape))};
  };
  auto out = [](const T& t, const std::string& name) { t.graph()->MarkOutput(t.id(), name); };
  const std::vector<SymbolBindings> sizes = {{{"n", 1}}, {{"n", 3}}, {{"n", 17}}, {{"n", 4097}}};
  const std::vector<SymbolBindings> seqs = {{{"seq", 1}}, {{"seq", 3}}, {{"seq", 17}}};
  std::vector<OpGraphCase> cases;

  // ---- primitives
  cases.push_back({"unary",
                   [=](Graph& g) {
                     NodeId x = g.Input("x", DType::F32, {N()});
                     T pos = T{&g, x}.abs() + 0.1;
                     g.MarkOutput(g.Unary(Op::Exp2, x), "exp2");
                     g.MarkOutput(g.Unary(Op::Log2, pos.id()), "log2");
                     g.MarkOutput(g.Unary(Op::Sin, x), "sin");
                     g.MarkOutput(g.Unary(Op::Sqrt, pos.id()), "sqrt");
                     g.MarkOutput(g.Unary(Op::Recip, pos.id()), "recip");
                   },
                   sizes, 1e-5, 1e-5});
  cases.push_back({"binary_where",
                   [=](Graph& g) {
                     NodeId a = g.Input("a", DType::F32, {N(), Expr(3)});
                     NodeId b = g.Input("b", DType::F32, {N(), Expr(3)});
                     for (Op op : {Op::Add, Op::Mul, Op::Max, Op::LessThan})
                       g.MarkOutput(g.Binary(op, a, b), std::string(OpName(op)));
                     g.MarkOutput(g.Binary(Op::Mod, a, (T{&g, b}.abs() + 0.5).id()), "mod");
                     g.MarkOutput(g.Where(g.Binary(Op::LessThan, a, b), a, b), "where");
                   },
                   sizes, 1e-6, 1e-6});
  cases.push_back({"casts",
                   [=](Graph& g) {
                     NodeId x = g.Input("x", DType::F32, {N()});
                     T t = T{&g, x} * 40.0;
                     for (DType d : {DType::F16, DType::BF16, DType::I32, DType::I8, DType::U8, DType::Bool})
                       g.MarkOutput(g.Cast(t.id(), d), "to_" + std::string(DTypeName(d)));
                     NodeId i = g.Input("i", DType::I32, {N()});
                     g.MarkOutput(g.Cast(i, DType::F32), "int_to_f32");
                     g.MarkOutput(g.Binary(Op::Add, i, i), "int_add");
                   },
                   sizes, 0, 0});
  cases.push_back({"half_and_quantized_storage",
                   [=](Graph& g) {
                     NodeId h = g.Input("h", DType::F16, {N(), Expr(64)});
                     NodeId bf = g.Input("bf", DType::BF16, {N(), Expr(64)});
                     NodeId q8 = g.Weight("q8", DType::Q8_0, {Expr(5), Expr(64)});
                     NodeId q4 = g.Weight("q4", DType::Q4_0, {Expr(5), Expr(64)});
                     g.MarkOutput(g.Binary(Op::Add, h, bf), "sum");
                     g.MarkOutput(g.Binary(Op::Mul, h, h), "f16_mul");
                     g.MarkOutput(g.Cast(q8, DType::F32), "q8");
                     g.MarkOutput(g.Cast(q4, DType::F32), "q4");
                   },
                   {{{"n", 1}}, {{"n", 7}}},
                   2e-3,
                   2e-3});
  cases.push_back({"reductions_over_each_axis",
                   [=](Graph& g) {
                     NodeId x = g.Input("x", DType::F32, {Expr(3), N(), Expr(17)});
                     for (std::vector<int64_t> axes :
                          std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
                       g.MarkOutput(g.Reduce(Op::SumReduce, x, axes), "sum");
                       g.MarkOutput(g.Reduce(Op::MaxReduce, x, axes), "max");
                     }
                   },
                   sizes, 1e-3, 1e-4});
  cases.push_back({"int_reductions",
                   [=](Graph& g) {  // integer accumulators in local memory
                     NodeId i = g.Input("i", DType::I32, {Expr(5), N()});
                     g.MarkOutput(g.Reduce(Op::SumReduce, i, {1}), "isum");
                     g.MarkOutput(g.Reduce(Op::MaxReduce, i, {0, 1}), "imax");
                   },
                   sizes, 0, 0});
  cases.push_back(
      {"iota_and_constant",
       [=](Graph& g) {
         g.MarkOutput(g.Iota({N(), Expr(4)}, 0, DType::I32), "iota0");
         NodeId io1 = g.Iota({N(), Expr(4)}, 1, DType::F32);
         g.MarkOutput(g.Binary(Op::Add, io1, g.Constant(0.5, DType::F32, {N(), Expr(4)})), "iota1");
       },
       sizes, 0, 0});
  cases.push_back({"gather_rows_and_columns",
                   [=](Graph& g) {
                     NodeId table = g.Weight("table", DType::F32, {Expr(11), Expr(6)});
                     NodeId ids = g.Input("ids", DType::I32, {N(), Expr(6)});
                     g.MarkOutput(g.Gather(table, ids, 0), "rows");
                     NodeId cols = g.Input("cols", DType::I32, {Expr(11), N()});
                     g.MarkOutput(g.Gather(g.Slice(table, {0, 0}, {Expr(11), N()}, {}), cols, 1), "cols");
                   },
                   {{{"n", 1}}, {{"n", 3}}, {{"n", 6}}},
                   0,
                   0});
  cases.push_back({"movement_views",
                   [=](Graph& g) {
                     NodeId x = g.Input("x", DType::F32, {N(), Expr(6), Expr(4)});
                     NodeId p = g.Permute(x, {2, 0, 1});
                     g.MarkOutput(p, "permute");
                     g.MarkOutput(g.Reshape(p, {Expr(4), N() * 6}), "permute_reshape");
                     NodeId r = g.Reshape(x, {N(), Expr(3), Expr(8)});
                     g.MarkOutput(g.Slice(r, {0, 1, 1}, {N(), Expr(2), Expr(3)}, {1, 1, 3}), "strided_slice");
                     g.MarkOutput(g.Pad(x, {1, 0, 2}, {0, 3, 1}), "pad");
                     NodeId one = g.Reduce(Op::SumReduce, x, {1});
                     g.MarkOutput(g.Expand(one, {N(), Expr(5), Expr(4)}), "expand");
                     g.MarkOutput(g.Binary(Op::Add, g.Permute(p, {1, 2, 0}), x), "permute_back_add");
                   },
                   sizes, 1e-4, 1e-5});
  {
    OpGraphCase c{"state_write_at_symbolic_offset",
                  [=](Graph& g) {
                    NodeId cache = g.State("cache", DType::F32, {Expr(16), Expr(3)});
                    NodeId v = g.Input("v", DType::F32, {N(), Expr(3)});
                    NodeId wr = g.StateWrite(cache, v, 0, Expr::Sym("past"));
                    g.MarkOutput(g.Slice(wr, {0, 0}, {Expr::Sym("past") + N(), Expr(3)}, {}), "visible");
                    g.MarkOutput(g.Reduce(Op::SumReduce, wr, {0}), "sum");
                  },
                  {},
                  1e-5,
                  1e-5,
                  true};
    int64_t past = 0;
    for (int64_t n : {3, 1, 1, 5}) {
      c.bindings.push_back({{"n", n}, {"past", past}});
      past += n;
    }
    cases.push_back(c);
  }

  // ---- high-level ops
  cases.push_back({"matmul",
                   [=](Graph& g) {
                     T a = in(g, "a", {Expr(2), Expr(1), S(), Expr(5)});
                     T b = in(g, "b", {Expr(3), Expr(5), Expr(7)});
                     out(Matmul(a, b), "mm");
                     T x = in(g, "x", {S(), Expr(17)});
                     out(Linear(x, w(g, "w", {Expr(4097), Expr(17)}), w(g, "bias", {Expr(4097)})), "linear");
                     out(Matmul(x.transpose(0, 1), x), "gram");
                   },
                   seqs, 1e-4, 1e-4});
  cases.push_back({"softmax_family_and_norms",
                   [=](Graph& g) {
                     T x = in(g, "x", {S(), Expr(33)});
                     out(Softmax(x), "softmax");
                     out(Softmax(x, 0), "softmax_axis0");
                     out(LogSoftmax(x), "log_softmax");
                     out(RmsNorm(x, w(g, "rw", {Expr(33)}), 1e-5), "rms_norm");
                     out(LayerNorm(x, w(g, "lw", {Expr(33)}), w(g, "lb", {Expr(33)}), 1e-5), "layer_norm");
                     out(x.mean({-1}), "mean");
                     out(x.var({0}), "var_symbolic_count");
                     out(x.var({-1}, false, true), "var_unbiased");
                   },
                   seqs, 1e-4, 1e-4});
  cases.push_back({"activations",
                   [=](Graph& g) {
                     T x = in(g, "x", {S()});
                     out(Silu(x), "silu");
                     out(GeluTanh(x), "gelu_tanh");
                     out(GeluErf(x), "gelu_erf");
                     out(x.tanh(), "tanh");
                     out(x.cos(), "cos");
                   },
                   {{{"seq", 4097}}},
                   1e-5,
                   1e-5});
  cases.push_back({"concat_slice_transpose_reshape_where_argmax",
                   [=](Graph& g) {
                     T a = in(g, "a", {S(), Expr(3)}), b = in(g, "b", {S(), Expr(5)});
                     out(Concat({a, b, a}, 1), "concat_last");
                     out(Concat({a, a}, 0), "concat_symbolic_axis");
                     out(b.slice(1, 1, 3).transpose(0, 1).reshape({Expr(3) * S()}),
                         "slice_transpose_reshape");
                     out(Where(Less(a, Full(&g, 0.0, {Expr(3)})), a, a * 2.0), "where_broadcast");
                     out(Argmax(b, 1), "argmax");
                     out(Argmax(b, 0, true), "argmax_symbolic_axis");
                   },
                   seqs, 1e-5, 1e-5});
  cases.push_back({"embedding",
                   [=](Graph& g) {
                     T ids = in(g, "ids", {S()}, DType::I32);
                     out(Embedding(w(g, "emb", {Expr(8), Expr(16)}), ids), "emb_f32");
                     out(Embedding(w(g, "emb_q8", {Expr(8), Expr(64)}, DType::Q8_0), ids), "emb_q8");
                     out(Embedding(w(g, "emb_q4", {Expr(8), Expr(64)}, DType::Q4_0), ids), "emb_q4");
                     out(Embedding(w(g, "emb_q4_k", {Expr(8), Expr(256)}, DType::Q4_K), ids), "emb_q4_k");
                     out(Embedding(w(g, "emb_q6_k", {Expr(8), Expr(256)}, DType::Q6_K), ids), "emb_q6_k");
                     out(Embedding(w(g, "emb_f16", {Expr(8), Expr(16)}, DType::F16), ids), "emb_f16");
                     out(Embedding(w(g, "emb_bf16", {Expr(8), Expr(16)}, DType::BF16), ids), "emb_bf16");
                   },
                   seqs, 1e-6, 1e-6});
  cases.push_back({"quantized_and_half_linear",
                   [=](Graph& g) {  // dequantize fused into a reduction
                     T x = in(g, "x", {S(), Expr(128)});
                     out(Linear(x, w(g, "wq8", {Expr(40), Expr(128)}, DType::Q8_0)), "q8");
                     out(Linear(x, w(g, "wq4", {Expr(40), Expr(128)}, DType::Q4_0)), "q4");
                     out(Linear(x, w(g, "wbf", {Expr(40), Expr(128)}, DType::BF16)), "bf16");
                     out(Linear(x, w(g, "wh", {Expr(40), Expr(128)}, DType::F16)), "f16");
                     // GGUF's other block formats: 32-value blocks here, 256-value super-blocks below.
                     for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL})
                       out(Linear(x, w(g, "w" + std::string(DTypeName(t)), {Expr(9), Expr(128)}, t)),
                           std::string(DTypeName(t)));
                     T x2 = in(g, "x2", {S(), Expr(256)});
                     for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS})
                       out(Linear(x2, w(g, "w" + std::string(DTypeName(t)), {Expr(5), Expr(256)}, t)),
                           std::string(DTypeName(t)));
                   },
                   seqs, 1e-4, 1e-4});
  cases.push_back({"expert_linear_and_top_k",
                   [=](Graph& g) {  // ids 0..7 over 5 experts: the last ones clamp, as Gather does
                     T x = in(g, "x", {S(), Expr(64)}), ids = in(g, "ids", {S()}, DType::I32);
                     for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0})
                       out(ExpertLinear(x, w(g, "e" + std::string(DTypeName(t)), {Expr(5), Expr(24), Expr(64)}, t),
                                        ids),
                           std::string(DTypeName(t)));
                     T x2 = in(g, "x2", {S(), Expr(256)});
                     for (DType t : {DType::Q4_K, DType::Q6_K})
                       out(ExpertLinear(x2, w(g, "e" + std::string(DTypeName(t)), {Expr(5), Expr(9), Expr(256)}, t),
                                        ids),
                           std::string(DTypeName(t)));
                     TopKResult top = TopK(x, 3);
                     out(top.values, "top_values");
                     out(top.indices, "top_indices");
                   },
                   seqs, 1e-4, 1e-4});
  cases.push_back(
      {"rope_both_styles_and_llama3_scaling",
       [=](Graph& g) {
         T x = in(g, "x", {S(), Expr(4), Expr(16)});
         T pos = in(g, "pos", {S()}, DType::I32);
         T inv = RopeInvFreq(&g, 16, 10000.0);
         out(Rope(x, pos, inv, RopeStyle::HalfSplit), "half");
         out(Rope(x, pos, inv, RopeStyle::Interleaved), "interleaved");
         out(Rope(x, pos, RopeInvFreq(&g, 16, 500000.0, {8.0, 1.0, 4.0, 64}), RopeStyle::HalfSplit),
             "llama3");
       },
       seqs, 1e-5, 1e-5});
  {
    OpGraphCase c{"causal_gqa_attention_with_kv_state",
                  [=](Graph& g) {
                    Expr past = Expr::Sym("past");
                    T q = in(g, "q", {S(), Expr(4), Expr(8)});
                    T k = in(g, "k", {S(), Expr(2), Expr(8)});
                    T v = in(g, "v", {S(), Expr(2), Expr(8)});
                    T kc{&g, g.State("k_cache", DType::F32, {Expr(2), Expr(32), Expr(8)})};
                    T vc{&g, g.State("v_cache", DType::F32, {Expr(2), Expr(32), Expr(8)})};
                    out(CausalAttention(q, k, v, kc, vc, past, 1.0 / std::sqrt(8.0)), "attn");
                  },
                  {},
                  1e-5,
                  1e-4,
                  true};
    int64_t p = 0;
    for (int64_t n : {5, 1, 1, 3}) {  // a prefill then decode steps through one compiled program
      c.bindings.push_back({{"seq", n}, {"past", p}});
      p += n;
    }
    cases.push_back(c);
  }
  {
    // An encoder's attention: every query sees every key of its input, each run rewriting the scratch rows.
    OpGraphCase c{"bidirectional_gqa_attention",
                  [=](Graph& g) {
                    T q = in(g, "q", {S(), Expr(6), Expr(8)});
                    T k = in(g, "k", {S(), Expr(3), Expr(8)});
                    T v = in(g, "v", {S(), Expr(3), Expr(8)});
                    T kc{&g, g.State("k_cache", DType::F32, {Expr(3), Expr(32), Expr(8)})};
                    T vc{&g, g.State("v_cache", DType::F32, {Expr(3), Expr(32), Expr(8)})};
                    out(CausalAttention(q, k, v, kc, vc, Expr(0), 0.3, {.bidirectional = true}), "attn");
                  },
                  {{{"seq", 7}}, {{"seq", 1}}, {{"seq", 19}}},
                  1e-5,
                  1e-4,
                  true};
    cases.push_back(c);
  }
  {
    // ModernBERT's local layers: every query sees the keys fewer than 4 positions away, either way.
    OpGraphCase c{"bidirectional_windowed_attention",
                  [=](Graph& g) {
                    T q = in(g, "q", {S(), Expr(4), Expr(8)});
                    T k = in(g, "k", {S(), Expr(2), Expr(8)});
                    T v = in(g, "v", {S(), Expr(2), Expr(8)});
                    T kc{&g, g.State("k_cache", DType::F32, {Expr(2), Expr(32), Expr(8)})};
                    T vc{&g, g.State("v_cache", DType::F32, {Expr(2), Expr(32), Expr(8)})};
                    out(CausalAttention(q, k, v, kc, vc, Expr(0), 0.9, {.window = 4, .bidirectional = true}),
                        "attn");
                  },
                  {{{"seq", 9}}, {{"seq", 1}}, {{"seq", 3}}, {{"seq", 21}}},
                  1e-5,
                  1e-4,
                  true};
    cases.push_back(c);
  }
  return cases;
}

}  // namespace prism::testing
