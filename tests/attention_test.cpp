// Fused causal attention: the pattern match (what it takes, what it refuses) and the CPU template
// against the reference interpreter over head layouts, odd sizes, prefill and decode, and the search.
#include "backends/cpu/attention.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "frontend/nn.h"
#include "graph_check.h"
#include "search/schedule_search.h"
#include "test_util.h"

namespace prism {
namespace {

Expr Seq() { return Expr::Sym("seq"); }
Expr Past() { return Expr::Sym("past"); }

struct Heads {
  int64_t kv, group, dim;
};

// q/k/v inputs, K/V caches of `cap` rows (head-major), one attention output.
Graph AttentionGraph(Heads hd, int64_t cap, const AttentionVariant& variant = {}) {
  Graph g;
  Tensor q{&g, g.Input("q", DType::F32, {Seq(), Expr(hd.kv * hd.group), Expr(hd.dim)})};
  Tensor k{&g, g.Input("k", DType::F32, {Seq(), Expr(hd.kv), Expr(hd.dim)})};
  Tensor v{&g, g.Input("v", DType::F32, {Seq(), Expr(hd.kv), Expr(hd.dim)})};
  Tensor kc{&g, g.State("k_cache", DType::F32, {Expr(hd.kv), Expr(cap), Expr(hd.dim)})};
  Tensor vc{&g, g.State("v_cache", DType::F32, {Expr(hd.kv), Expr(cap), Expr(hd.dim)})};
  Tensor a = CausalAttention(q, k, v, kc, vc, Past(), 1.0 / std::sqrt((double)hd.dim), variant);
  g.MarkOutput(a.id(), "attn");
  return g;
}

// The same over a paged pool of `blocks` blocks of `block` rows: inputs slots, block_table, positions.
Graph PagedAttentionGraph(Heads hd, int64_t block, int64_t blocks, const AttentionVariant& variant) {
  Graph g;
  const Expr t = Expr::Sym("seq"), nb = Expr::Sym("blocks");
  Tensor q{&g, g.Input("q", DType::F32, {t, Expr(hd.kv * hd.group), Expr(hd.dim)})};
  Tensor k{&g, g.Input("k", DType::F32, {t, Expr(hd.kv), Expr(hd.dim)})};
  Tensor v{&g, g.Input("v", DType::F32, {t, Expr(hd.kv), Expr(hd.dim)})};
  Tensor kp{&g, g.State("k_pool", DType::F32, {Expr(block * blocks), Expr(hd.kv), Expr(hd.dim)})};
  Tensor vp{&g, g.State("v_pool", DType::F32, {Expr(block * blocks), Expr(hd.kv), Expr(hd.dim)})};
  Tensor slots{&g, g.Input("slots", DType::I32, {t})}, table{&g, g.Input("block_table", DType::I32, {t, nb})};
  Tensor pos{&g, g.Input("positions", DType::I32, {t})};
  Tensor a =
      PagedAttention(q, k, v, kp, vp, slots, table, pos, block, 1.0 / std::sqrt((double)hd.dim), variant);
  g.MarkOutput(a.id(), "attn");
  return g;
}

int AttentionKernels(const KernelProgram& p, int* covered = nullptr) {
  int n = 0;
  for (const Kernel& k : p.kernels) {
    n += k.attention.has_value();
    if (covered && k.covered_by >= 0) ++*covered;
  }
  return n;
}

// A prefill, decode steps, then another prefill chunk on top of the cache: the compiled program
// (fused template where the CPU has it) against the interpreter.
void CheckSteps(const Graph& g, int threads, const std::string& what) {
  CompileOptions opts;
  opts.threads = threads;
  auto prog = Program::Compile(g, opts);
  Interpreter interp(g);
  int64_t past = 0;
  for (int64_t n : {37, 1, 1, 19, 2}) {
    SymbolBindings b{{"seq", n}, {"past", past}};
    auto in = testing::RandomTensors(g, Op::Input, b, 7 + past);
    testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4,
                         what + " seq=" + std::to_string(n) + " past=" + std::to_string(past));
    past += n;
  }
}

}  // namespace

TEST(AttentionMatch, FindsTheFrontendsAttentionAndCoversItsKernels) {
  Graph g = AttentionGraph({2, 3, 20}, 96);
  KernelProgram p = BuildKernelProgram(g);
  int covered = 0;
  EXPECT_EQ(AttentionKernels(p, &covered), 1);
  EXPECT_GE(covered, 3);  // scores, max, exp (and the sum) run only in the unfused form
  for (const Kernel& k : p.kernels)
    if (k.attention) {
      EXPECT_EQ(k.attention->heads_kv, 2);
      EXPECT_EQ(k.attention->group, 3);
      EXPECT_EQ(k.attention->head_dim, 20);
      EXPECT_EQ(k.attention->offset.str(), (Past() + Expr(1)).str());
      EXPECT_NEAR(k.attention->scale, 1.0 / std::sqrt(20.0), 1e-12);
    }
  FusionOptions off;
  off.templates = false;
  EXPECT_EQ(AttentionKernels(BuildKernelProgram(g, off)), 0);
}

// The same computation spelled differently: another mask, or scores read from another layout. The
// matcher must refuse what it does not compute, and the program stays right either way.
TEST(AttentionMatch, RefusesLookalikesTakesOtherLayoutsAndAllMatchTheInterpreter) {
  for (int variant = 0; variant < 3; ++variant) {
    Graph g;
    const Expr seq = Seq(), past = Past(), total = past + seq;
    Tensor q{&g, g.Input("q", DType::F32, {seq, Expr(2), Expr(8)})};
    Tensor k{&g, g.Input("k", DType::F32, {seq, Expr(2), Expr(8)})};
    Tensor v{&g, g.Input("v", DType::F32, {seq, Expr(2), Expr(8)})};
    Tensor kc{&g, g.State("kc", DType::F32, {Expr(64), Expr(2), Expr(8)})};
    Tensor vc{&g, g.State("vc", DType::F32, {Expr(64), Expr(2), Expr(8)})};
    Tensor kw{&g, g.StateWrite(kc.id(), k.id(), 0, past)}, vw{&g, g.StateWrite(vc.id(), v.id(), 0, past)};
    Tensor keys = kw.slice(0, 0, total), vals = vw.slice(0, 0, total);
    Tensor qg = q.reshape({seq, Expr(2), Expr(1), Expr(8)}).permute({1, 2, 0, 3});
    Tensor kt = keys.permute({1, 0, 2}).unsqueeze(1);
    // variant 2: every query head reads key head 0 (a key head stride of 0: the template takes it)
    if (variant == 2) kt = keys.slice(1, 0, Expr(1)).permute({1, 0, 2}).unsqueeze(1);
    Tensor scores = Matmul(qg, kt.transpose(-1, -2)) * 0.35;
    std::vector<Expr> sshape = {Expr(2), Expr(1), seq, total};
    Tensor t_idx{&g, g.Iota(sshape, 3, DType::I32)}, s_idx{&g, g.Iota(sshape, 2, DType::I32)};
    Tensor limit = s_idx + BroadcastTo(ExprValue(&g, past + Expr(1), DType::I32), sshape);
    // variant 0: the causal mask the other way round (keys at or after the query), refused; 1: no mask at
    // all, taken as attention over every key
    Tensor visible = variant == 0
                         ? Less(s_idx, t_idx + BroadcastTo(ExprValue(&g, Expr(1), DType::I32), sshape))
                         : Less(t_idx, limit);
    Tensor masked = variant == 1 ? scores : Where(visible, scores, Full(&g, -INFINITY, sshape));
    Tensor out = Matmul(Softmax(masked, -1), vals.permute({1, 0, 2}).unsqueeze(1));
    g.MarkOutput(out.id(), "o");
    EXPECT_EQ(AttentionKernels(BuildKernelProgram(g)), variant == 0 ? 0 : 1) << "variant " << variant;
    auto prog = Program::Compile(g);
    Interpreter interp(g);
    int64_t p = 0;
    for (int64_t n : {6, 1}) {
      SymbolBindings b{{"seq", n}, {"past", p}};
      auto in = testing::RandomTensors(g, Op::Input, b, 40 + p);
      auto want = interp.Run(in, b);
      testing::ExpectClose(want, prog->Run(in, b), 1e-5, 1e-4, "variant " + std::to_string(variant));
      p += n;
    }
  }
}

// Attention over tensors (PyTorch's scaled_dot_product_attention): queries and keys head-major as torch
// holds them, values row-major behind another head (as a fused QKV product's slices are), an additive mask
// computed in the graph (some keys hidden by -inf, key 0 never), with and without the causal limit, over
// group sizes and odd lengths. The template takes every layout and the mask, and the program equals the
// interpreter.
TEST(AttentionMatch, TensorAttentionTakesOtherLayoutsAndAMask) {
  for (bool causal : {false, true})
    for (Heads hd : std::vector<Heads>{{2, 2, 16}, {1, 3, 20}, {3, 1, 40}}) {
      const std::string what = std::string(causal ? "causal" : "masked") + " H=" + std::to_string(hd.kv) +
                               " G=" + std::to_string(hd.group) + " D=" + std::to_string(hd.dim);
      Graph g;
      const Expr seq = Seq();
      Tensor q{&g, g.Input("q", DType::F32, {Expr(hd.kv * hd.group), seq, Expr(hd.dim)})};
      Tensor k{&g, g.Input("k", DType::F32, {Expr(hd.kv), seq, Expr(hd.dim)})};
      Tensor vx{&g, g.Input("v", DType::F32, {seq, Expr(hd.kv + 1), Expr(hd.dim)})};
      Tensor v = vx.slice(1, Expr(1), Expr(hd.kv));  // values after one other head: an offset into the buffer
      Tensor m{&g, g.Input("m", DType::F32, {seq, seq})};
      const std::vector<Expr> ms = {seq, seq};
      Tensor later = Less(Full(&g, 0, ms, DType::I32), Tensor{&g, g.Iota(ms, 1, DType::I32)});
      Tensor mask = Where(later, Where(Less(m, Full(&g, -0.5, ms)), Full(&g, -INFINITY, ms), m), m);
      Tensor rope_q = q * 1.25, rope_k = k + 0.5;  // computed, as RoPE's outputs are
      Tensor out = Attention(rope_q.permute({1, 0, 2}), rope_k.permute({1, 0, 2}), v, mask, 0.3, causal);
      g.MarkOutput(out.id(), "o");
      KernelProgram kp = BuildKernelProgram(g);
      ASSERT_EQ(AttentionKernels(kp), 1) << what;
      for (const Kernel& kn : kp.kernels) {
        if (kn.attention) {
          EXPECT_FALSE(kn.attention->Plain()) << what;
        }
      }
      for (int threads : {1, 2}) {
        CompileOptions opts;
        opts.threads = threads;
        auto prog = Program::Compile(g, opts);
        Interpreter interp(g);
        for (int64_t n : {37, 1, 5, 18}) {
          SymbolBindings b{{"seq", n}};
          auto in = testing::RandomTensors(g, Op::Input, b, 11 + n);
          testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4,
                               what + " threads=" + std::to_string(threads) + " seq=" + std::to_string(n));
        }
      }
    }
}

// Texts packed into one sequence (an encoder's step of several): a mask hides the other texts' keys, with a
// bias inside some texts' own spans (random, or a band hiding keys 3 or more away) and zeros in others.
// Blocks of query rows skip the keys before and after what their rows see, and add nothing where their rows'
// masks are zero; text boundaries fall inside blocks. The program equals the interpreter on one and two
// threads (ctest runs this file on the AVX2 kernel too).
TEST(AttentionMatch, PackedTextsSeeOnlyTheirOwnKeys) {
  for (Heads hd : std::vector<Heads>{{2, 2, 16}, {1, 3, 40}}) {
    Graph g;
    const Expr seq = Seq();
    Tensor q{&g, g.Input("q", DType::F32, {seq, Expr(hd.kv * hd.group), Expr(hd.dim)})};
    Tensor k{&g, g.Input("k", DType::F32, {seq, Expr(hd.kv), Expr(hd.dim)})};
    Tensor v{&g, g.Input("v", DType::F32, {seq, Expr(hd.kv), Expr(hd.dim)})};
    Tensor m{&g, g.Input("m", DType::F32, {seq, seq})};
    g.MarkOutput(Attention(q * 1.25, k + 0.5, v, m, 0.3, false).id(), "o");
    ASSERT_EQ(AttentionKernels(BuildKernelProgram(g)), 1);
    for (int threads : {1, 2}) {
      CompileOptions opts;
      opts.threads = threads;
      auto prog = Program::Compile(g, opts);
      Interpreter interp(g);
      for (const std::vector<int64_t>& lengths : std::vector<std::vector<int64_t>>{
               {7, 1, 13, 20, 3}, {40}, {2, 2, 2}, {16, 16, 5}, {1}, {9, 30, 1, 1, 25}}) {
        int64_t n = 0;
        for (int64_t len : lengths) n += len;
        SymbolBindings b{{"seq", n}};
        auto in = testing::RandomTensors(g, Op::Input, b, 20 + n);
        float* mask = static_cast<float*>(in.at("m").data);
        for (int64_t s0 = 0, text = 0; text < (int64_t)lengths.size(); s0 += lengths[text], ++text)
          for (int64_t s = s0; s < s0 + lengths[text]; ++s)
            for (int64_t t = 0; t < n; ++t) {
              float& x = mask[s * n + t];
              const bool own = t >= s0 && t < s0 + lengths[text];
              if (!own)
                x = -INFINITY;
              else if (text % 3 == 1)
                x = std::abs(s - t) >= 3 ? -INFINITY : 0.0f;  // a window
              else if (text % 3 == 0)
                x = 0.0f;  // plain: nothing to add
            }              // text % 3 == 2: the random bias stays
        std::string what = "H=" + std::to_string(hd.kv) + " G=" + std::to_string(hd.group) +
                           " threads=" + std::to_string(threads) + " texts";
        for (int64_t len : lengths) what += " " + std::to_string(len);
        testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4, what);
      }
    }
  }
}

// Two sequences' attention spelled as batched matmuls ([B, H, S, D] operands and a mask, as an unfused
// scaled_dot_product_attention over a batch): the sequence and head axes look like the pattern's K/V head
// and group axes, but each one's keys are its own. The matcher must refuse it (a key's place depends on the
// query's group head), and the program equals the interpreter.
TEST(AttentionMatch, RefusesKeysThatMoveWithTheQueryHead) {
  for (int64_t fixed : {0, 5, 1}) {  // a symbolic length, then fixed ones (as torch.compile's static graphs)
    Graph g;
    const Expr seq = fixed ? Expr(fixed) : Seq();
    Tensor q{&g, g.Input("q", DType::F32, {Expr(2), Expr(4), seq, Expr(16)})};
    Tensor k{&g, g.Input("k", DType::F32, {Expr(2), Expr(4), seq, Expr(16)})};
    Tensor v{&g, g.Input("v", DType::F32, {Expr(2), Expr(4), seq, Expr(16)})};
    Tensor m{&g, g.Input("m", DType::F32, {Expr(1), Expr(1), seq, seq})};
    Tensor scores = Matmul(q, k.transpose(-1, -2)) * 0.25;
    Tensor out = Matmul(Softmax(scores + BroadcastTo(m, scores.shape()), -1), v);
    g.MarkOutput(out.id(), "o");
    EXPECT_EQ(AttentionKernels(BuildKernelProgram(g)), 0) << "length " << seq.str();
    auto prog = Program::Compile(g);
    Interpreter interp(g);
    for (int64_t n : fixed ? std::vector<int64_t>{fixed} : std::vector<int64_t>{9, 1}) {
      SymbolBindings b = fixed ? SymbolBindings{} : SymbolBindings{{"seq", n}};
      auto in = testing::RandomTensors(g, Op::Input, b, 5 + n);
      testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4,
                           "batched seq=" + std::to_string(n));
    }
  }
}

// Sliding windows and soft-capped scores (Gemma 2 and 3, Phi-3, Mistral): compiled against the
// interpreter over prefill, decode and chunks past the window; no fused template takes them (it has no
// window); and no key before a query's window is read: keys and values planted as NaN there stay out.
TEST(WindowedAttention, CompiledMatchesInterpreterAndReadsNoKeyBeforeTheWindow) {
  // Soft-capped scores run unfused; a window alone (Gemma 3's local layers, Mistral) in the fused template,
  // its keys before the window an additive -inf.
  for (const AttentionVariant& variant :
       {AttentionVariant{.window = 5, .softcap = 2.5}, AttentionVariant{.window = 5}}) {
    const std::string what = variant.softcap > 0 ? "window 5, softcap 2.5" : "window 5";
    Graph g = AttentionGraph({2, 2, 8}, 80, variant);
    EXPECT_EQ(AttentionKernels(BuildKernelProgram(g)), variant.softcap > 0 ? 0 : 1) << what;
    CheckSteps(g, 2, what);
    auto prog = Program::Compile(g);
    Interpreter interp(g);
    int64_t past = 0;
    for (int64_t n : {12, 1, 3, 1}) {
      SymbolBindings b{{"seq", n}, {"past", past}};
      auto in = testing::RandomTensors(g, Op::Input, b, 90 + past);
      if (past == 0)  // positions 0..2 poisoned: every later step's windows start past them
        for (const char* name : {"k", "v"})
          for (int64_t i = 0; i < 3 * 2 * 8; ++i) static_cast<float*>(in[name].data)[i] = NAN;
      auto want = interp.Run(in, b), got = prog->Run(in, b);
      if (past > 0) {
        for (float x : want[0].ToFloats())
          ASSERT_TRUE(std::isfinite(x)) << what << ", interpreter, past=" << past;
        testing::ExpectClose(want, got, 1e-5, 1e-4, what + ", poisoned cache, past=" + std::to_string(past));
      }
      past += n;
    }
  }
}

// The paged form gathers only the blocks a token's window touches: a sequence's blocks scattered over the
// pool, its first three positions poisoned, then decode tokens (alone and two at once) whose windows start
// after them; each equals the one-sequence windowed attention over the same keys.
TEST(WindowedAttention, PagedGathersOnlyTheWindowAndMatchesTheCausalForm) {
  const AttentionVariant variant{.window = 6, .softcap = 3};
  const Heads hd{2, 2, 8};
  const int64_t block = 4, hq = hd.kv * hd.group, row = hd.kv * hd.dim;
  Graph paged = PagedAttentionGraph(hd, block, 12, variant), causal = AttentionGraph(hd, 64, variant);
  auto prog = Program::Compile(paged);
  Interpreter pinterp(paged), cinterp(causal);
  const std::vector<int32_t> blocks = {7, 3, 11, 0, 5, 9};  // the sequence's block table
  auto run = [&](int64_t p0, int64_t n, uint64_t seed, bool poison) {
    auto q = testing::RandomFloats(n * hq * hd.dim, seed), k = testing::RandomFloats(n * row, seed + 1),
         v = testing::RandomFloats(n * row, seed + 2);
    if (poison)
      for (int64_t i = 0; i < 3 * row; ++i) k[i] = v[i] = NAN;
    std::vector<int32_t> slots, table, pos;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = p0 + i;
      slots.push_back(blocks[p / block] * (int32_t)block + (int32_t)(p % block));
      pos.push_back((int32_t)p);
      table.insert(table.end(), blocks.begin(), blocks.end());
    }
    std::map<std::string, HostTensor> in = {
        {"q", HostTensor::FromFloats({n, hq, hd.dim}, q)},
        {"k", HostTensor::FromFloats({n, hd.kv, hd.dim}, k)},
        {"v", HostTensor::FromFloats({n, hd.kv, hd.dim}, v)},
        {"slots", HostTensor::FromInts({n}, slots)},
        {"positions", HostTensor::FromInts({n}, pos)},
        {"block_table", HostTensor::FromInts({n, (int64_t)blocks.size()}, table)}};
    SymbolBindings pb{{"seq", n}, {"blocks", (int64_t)blocks.size()}}, cb{{"seq", n}, {"past", p0}};
    auto want = cinterp.Run({{"q", in["q"]}, {"k", in["k"]}, {"v", in["v"]}}, cb);
    auto interp_out = pinterp.Run(in, pb), got = prog->Run(in, pb);
    return std::make_tuple(want, interp_out, got);
  };
  run(0, 13, 5, true);
  int64_t p = 13;
  for (int64_t n : {1, 2, 1}) {
    auto [want, interp_out, got] = run(p, n, 50 + p, false);
    const std::string what = "paged, positions " + std::to_string(p) + ".." + std::to_string(p + n - 1);
    for (float x : interp_out[0].ToFloats()) ASSERT_TRUE(std::isfinite(x)) << what;
    testing::ExpectClose(want, interp_out, 1e-5, 1e-4, what + " (interpreter)");
    testing::ExpectClose(want, got, 1e-5, 1e-4, what + " (compiled)");
    p += n;
  }
}

TEST(AttentionTemplate, MatchesTheInterpreterOverHeadLayoutsAndSizes) {
  if (!AttentionTemplateSupported()) GTEST_SKIP() << "no AVX2 or AVX-512 here: the unfused kernels run";
  // Head sizes below, at and above one 16-lane vector and one 64-wide strip; groups 1 to 4.
  for (Heads hd : std::vector<Heads>{{1, 1, 5}, {2, 3, 20}, {2, 4, 64}, {1, 2, 72}, {3, 1, 130}, {4, 2, 8}})
    for (int threads : {1, 2}) {
      Graph g = AttentionGraph(hd, 80);
      ASSERT_EQ(AttentionKernels(BuildKernelProgram(g)), 1);
      CheckSteps(g, threads,
                 "H=" + std::to_string(hd.kv) + " G=" + std::to_string(hd.group) +
                     " D=" + std::to_string(hd.dim) + " threads=" + std::to_string(threads));
    }
}

// The paged form reads each sequence's keys where its blocks lie in the pools: two sequences with blocks
// scattered over the pool, prefilled together in one ragged step, then a decode step of both, against the
// interpreter, over head sizes of both value paths (at most 16, and strips of 64) and one or two threads.
TEST(AttentionTemplate, PagedReadsScatteredBlocksWhereTheyLie) {
  if (!AttentionTemplateSupported()) GTEST_SKIP() << "no AVX2 or AVX-512 here: the unfused kernels run";
  const int64_t block = 4;
  const std::vector<std::vector<int32_t>> blocks = {{7, 3, 11, 0}, {5, 9, 2, 10}};
  for (Heads hd : std::vector<Heads>{{2, 2, 8}, {1, 3, 40}, {2, 1, 72}})
    for (int threads : {1, 2}) {
      const std::string what = "H=" + std::to_string(hd.kv) + " G=" + std::to_string(hd.group) +
                               " D=" + std::to_string(hd.dim) + " threads=" + std::to_string(threads);
      Graph g = PagedAttentionGraph(hd, block, 12, {});
      ASSERT_EQ(AttentionKernels(BuildKernelProgram(g)), 1) << what;
      CompileOptions opts;
      opts.threads = threads;
      auto prog = Program::Compile(g, opts);
      Interpreter interp(g);
      // Step 1: 9 tokens of sequence 0 and 6 of sequence 1; step 2: one more token of each.
      for (auto [n0, n1, p0, p1] : std::vector<std::array<int64_t, 4>>{{9, 6, 0, 0}, {1, 1, 9, 6}}) {
        const int64_t n = n0 + n1;
        std::vector<int32_t> slots, table, pos;
        for (int64_t i = 0; i < n; ++i) {
          const int s = i < n0 ? 0 : 1;
          const int64_t p = (s == 0 ? p0 + i : p1 + i - n0);
          slots.push_back(blocks[s][p / block] * (int32_t)block + (int32_t)(p % block));
          pos.push_back((int32_t)p);
          table.insert(table.end(), blocks[s].begin(), blocks[s].end());
        }
        SymbolBindings b{{"seq", n}, {"blocks", 4}};
        auto in = testing::RandomTensors(g, Op::Input, b, 31 + p0);
        in["slots"] = HostTensor::FromInts({n}, slots);
        in["positions"] = HostTensor::FromInts({n}, pos);
        in["block_table"] = HostTensor::FromInts({n, 4}, table);
        testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4,
                             what + " step at " + std::to_string(p0) + ", " + std::to_string(p1));
      }
    }
}

// The kernel itself against a double-precision loop, including queries that see no key (offset 0):
// those are NaN in the unfused graph, and must be here too. Blocks of many rows (a prompt) and of at most 4
// (decode steps' group heads, whose kernels put keys in the lanes: AVX-512's below head size 32 runs
// AVX2's; AVX-512's takes up to 8 rows from head size 64), over head sizes with a partial vector and key
// counts past whole vectors.
TEST(AttentionTemplate, KernelMatchesClosedFormAndKeepsNaNForRowsWithoutKeys) {
  if (!AttentionTemplateSupported()) GTEST_SKIP() << "no AVX2 or AVX-512 here";
  for (const AttentionDims& a : {AttentionDims{2, 3, 24, 9, 13, 0, 0.3f, 1.4426950408889634f},
                                 AttentionDims{2, 2, 13, 1, 13, 0, 0.3f, 1.4426950408889634f},
                                 AttentionDims{3, 4, 8, 1, 21, 0, 0.4f, 1.4426950408889634f},
                                 AttentionDims{1, 2, 40, 2, 30, 0, 0.2f, 1.4426950408889634f},
                                 AttentionDims{2, 1, 64, 3, 37, 0, 0.15f, 1.4426950408889634f},
                                 AttentionDims{1, 4, 33, 1, 50, 0, 0.2f, 1.4426950408889634f},
                                 AttentionDims{2, 6, 72, 1, 45, 0, 0.1f, 1.4426950408889634f}}) {
    SCOPED_TRACE("G=" + std::to_string(a.group) + " D=" + std::to_string(a.head_dim) +
                 " seq=" + std::to_string(a.seq) + " total=" + std::to_string(a.total));
    const int64_t hd = a.heads_kv * a.head_dim, hq = a.heads_kv * a.group;
    auto q = testing::RandomFloats(a.seq * hq * a.head_dim, 1, -2, 2);
    auto k = testing::RandomFloats(a.total * hd, 2, -2, 2), v = testing::RandomFloats(a.total * hd, 3, -2, 2);
    for (int64_t offset : {int64_t{0}, int64_t{4}, a.total}) {
      AttentionDims d = a;
      d.offset = offset;
      std::vector<float> out(a.seq * hq * a.head_dim, 0);
      for (int t = 0; t < 2; ++t) CausalAttentionF32(q.data(), k.data(), v.data(), out.data(), d, t, 2);
      for (int64_t h = 0; h < a.heads_kv; ++h)
        for (int64_t gi = 0; gi < a.group; ++gi)
          for (int64_t s = 0; s < a.seq; ++s) {
            const int64_t n = std::min(a.total, s + offset);
            std::vector<double> w(n);
            double mx = -INFINITY, z = 0;
            for (int64_t t = 0; t < n; ++t) {
              double dot = 0;
              for (int64_t e = 0; e < a.head_dim; ++e)
                dot +=
                    (double)q[(s * hq + h * a.group + gi) * a.head_dim + e] * k[t * hd + h * a.head_dim + e];
              w[t] = a.scale * dot;
              mx = std::max(mx, w[t]);
            }
            for (int64_t t = 0; t < n; ++t) z += (w[t] = std::exp(w[t] - mx));
            for (int64_t e = 0; e < a.head_dim; ++e) {
              double o = 0;
              for (int64_t t = 0; t < n; ++t) o += w[t] / z * v[t * hd + h * a.head_dim + e];
              const float got = out[((h * a.group + gi) * a.seq + s) * a.head_dim + e];
              if (n == 0)
                EXPECT_TRUE(std::isnan(got)) << "s=" << s;
              else
                EXPECT_NEAR(got, o, 2e-5 * (1 + std::fabs(o)))
                    << "h=" << h << " g=" << gi << " s=" << s << " e=" << e;
            }
          }
    }
  }
}

// The search offers the fused form beside the unfused kernels, checks both against the reference
// and times the unfused one with the kernels it would skip.
TEST(AttentionTemplate, SearchChecksFusedAgainstUnfusedAndTheChoiceRuns) {
  if (!AttentionTemplateSupported()) GTEST_SKIP() << "no AVX2 or AVX-512 here";
  Graph g = AttentionGraph({2, 2, 32}, 160);
  CompileOptions copts;
  copts.threads = 2;
  auto prog = Program::Compile(g, copts);
  SearchOptions opts;
  opts.buckets = {{"prefill", {{"seq", 128}, {"past", 0}}}};
  opts.budget_seconds = testing::kUnreachedSearchBudget;
  nlohmann::json receipts = SearchSchedules(*prog, opts);
  bool seen = false;
  for (const auto& r : receipts) {
    if (r["kernel"].get<std::string>().find("_attention") == std::string::npos) continue;
    seen = true;
    ASSERT_TRUE(r.contains("unfused_kernels")) << r.dump();
    EXPECT_GE(r["unfused_kernels"].size(), 3u);
    int passed = 0;
    for (const auto& c : r["candidates"]) {
      EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
      passed += c["candidate"].get<std::string>().rfind("template-attention", 0) == 0;
    }
    EXPECT_GE(passed, 1);
    EXPECT_GT(r["flops"].get<double>(), 0);
  }
  EXPECT_TRUE(seen);
  Interpreter interp(g);
  SymbolBindings b{{"seq", 128}, {"past", 0}};
  auto in = testing::RandomTensors(g, Op::Input, b, 99);
  testing::ExpectClose(interp.Run(in, b), prog->Run(in, b), 1e-5, 1e-4, "after the search");
}

}  // namespace prism
