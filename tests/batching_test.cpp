// Batched, ragged steps over a paged KV cache give each sequence the logits and greedy text it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/attention.h"
#include "backends/cpu/program.h"
#include "ir/error.h"
#include "ir/interpreter.h"
#include "models/transformer.h"
#include "stories_reference.h"
#include "test_util.h"

namespace prism {
namespace {

const std::string kModel = testing::kStoriesDir + "stories260K.bin";

LoadOptions Batched(const std::string& device, int64_t block, int64_t blocks) {
  LoadOptions o;
  o.device = device;
  o.max_context = 256;
  o.kv_block = block;
  o.kv_blocks = blocks;
  return o;
}

// Logits of the last token of `ids` from the one-sequence path.
std::vector<float> Alone(LanguageModel& lm, const std::vector<int32_t>& ids) {
  lm.Reset();
  return lm.Forward(ids);
}

void ExpectClose(const std::vector<float>& want, std::span<const float> got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " logit " << i;
    ASSERT_NEAR(want[i], got[i], 1e-4 * std::max(scale, 1.0f)) << what << " logit " << i;
  }
}

// The graph itself: every batched-step input and the pool are where the interpreter expects them.
TEST(Batching, StepGraphTakesRaggedInputsAndScattersIntoThePool) {
  ModelConfig cfg;
  cfg.architecture = "llama";
  cfg.vocab_size = 11, cfg.hidden_size = 8, cfg.intermediate_size = 12, cfg.num_layers = 1;
  cfg.num_heads = 2, cfg.num_kv_heads = 1, cfg.head_dim = 4, cfg.max_position = 64;
  LmGraphOptions go;
  go.max_context = 64;
  go.kv_block = 4;
  go.kv_blocks = 6;
  Graph g = BuildCausalLM(cfg, SyntheticWeights(cfg, DType::F32), go);
  bool scatter = false;
  for (const Node& n : g.nodes()) scatter = scatter || n.op == Op::StateScatter;
  EXPECT_TRUE(scatter);
  std::vector<std::string> syms = g.Symbols();
  for (const char* s : {"seq", "blocks", "rows"})
    EXPECT_NE(std::find(syms.begin(), syms.end(), s), syms.end()) << s;
  EXPECT_EQ(std::find(syms.begin(), syms.end(), "past"), syms.end());
}

// The scatter writes row i of the value at row index[i] and leaves every other row as it was.
TEST(Batching, StateScatterWritesRowsAtTheirIndices) {
  Graph g;
  NodeId st = g.State("pool", DType::F32, {Expr(5), Expr(2)});
  NodeId v = g.Input("v", DType::F32, {Expr::Sym("n"), Expr(2)});
  NodeId ix = g.Input("ix", DType::I32, {Expr::Sym("n")});
  g.MarkOutput(g.StateScatter(st, v, ix), "pool");
  Interpreter in(g);
  auto out = in.Run(
      {{"v", HostTensor::FromFloats({2, 2}, {1, 2, 3, 4})}, {"ix", HostTensor::FromInts({2}, {3, 0})}});
  EXPECT_EQ(out[0].ToFloats(), (std::vector<float>{3, 4, 0, 0, 0, 0, 1, 2, 0, 0}));
  EXPECT_THROW(g.StateScatter(st, v, g.Input("bad", DType::F32, {Expr::Sym("n")})), Error);
  EXPECT_THROW(g.StateScatter(st, g.Input("w", DType::F32, {Expr::Sym("n"), Expr(3)}), ix), Error);
}

// Three sequences of different lengths share steps: prefill chunks beside decode tokens, blocks
// scattered over the pool in no order; each one's logits equal the one-sequence path's. With
// `prefill_device`, the pieces of several tokens run there and their rows move to `device` after (a chunk's
// earlier rows back to it before).
void ExpectRaggedStepsMatch(const std::string& device, const std::string& prefill_device = "") {
  auto one = LanguageModel::Load(kModel, {"", 256, 0, -1, prefill_device.empty() ? device : "cpu"});
  LoadOptions lo = Batched(device, 4, 40);
  lo.prefill_device = prefill_device;
  auto lm = LanguageModel::Load(kModel, lo);
  const Tokenizer& tok = one->tokenizer();
  std::vector<std::vector<int32_t>> seqs = {
      tok.Encode("Lily and Tom went to the park", true), tok.Encode("Once upon a time", true),
      tok.Encode("The cat sat on the mat and looked at the bird", true)};
  std::vector<std::vector<int32_t>> blocks = {{7, 3, 22, 9}, {0, 31, 5}, {12, 1, 30, 19, 2}};
  // Step 1: all of sequence 0, the first 5 tokens of sequence 2. Step 2: sequence 1 whole, one more
  // token of sequence 0, the rest of sequence 2.
  seqs[0].push_back(300);
  auto s0 = std::span<const int32_t>(seqs[0]);
  auto s2 = std::span<const int32_t>(seqs[2]);
  std::vector<BatchPiece> step1 = {{s0.first(s0.size() - 1), 0, blocks[0], true},
                                   {s2.first(5), 0, blocks[2], false}};
  auto r1 = lm->StepBatch(step1);
  ASSERT_EQ(r1.size(), 1u);
  ExpectClose(Alone(*one, std::vector<int32_t>(s0.begin(), s0.end() - 1)), r1[0], device + " step 1 seq 0");
  std::vector<BatchPiece> step2 = {{seqs[1], 0, blocks[1], true},
                                   {s0.last(1), (int64_t)s0.size() - 1, blocks[0], true},
                                   {s2.subspan(5), 5, blocks[2], true}};
  auto r2 = lm->StepBatch(step2);
  ASSERT_EQ(r2.size(), 3u);
  ExpectClose(Alone(*one, seqs[1]), r2[0], device + " step 2 seq 1");
  ExpectClose(Alone(*one, seqs[0]), r2[1], device + " step 2 seq 0");
  ExpectClose(Alone(*one, seqs[2]), r2[2], device + " step 2 seq 2");
  if (!prefill_device
           .empty()) {  // after step 1's prompts, and step 2's (with seq 2's first 5 rows back before)
    EXPECT_EQ(lm->handovers(), 3);
    EXPECT_EQ(lm->last_handover()["from"], prefill_device);
    // Seq 1 and the rest of seq 2 (seq 0's one token ran here).
    EXPECT_EQ(lm->last_handover()["rows"].get<int64_t>(), (int64_t)(seqs[1].size() + seqs[2].size() - 5));
  }
  // Bad pieces: a block outside the pool, too few blocks, a token outside the vocabulary.
  std::vector<int32_t> bad_blocks = {40};
  EXPECT_THROW(lm->StepBatch({{std::span<const int32_t>(seqs[1]).first(1), 0, bad_blocks, true}}), Error);
  EXPECT_THROW(lm->StepBatch({{seqs[2], 0, blocks[1], true}}), Error);
  std::vector<int32_t> bad_token = {100000};
  EXPECT_THROW(lm->StepBatch({{bad_token, 0, blocks[1], true}}), Error);
  EXPECT_THROW(lm->Forward(seqs[1]), Error);
}

TEST(Batching, RaggedStepsMatchOneSequenceOnTheInterpreter) { ExpectRaggedStepsMatch("interp"); }
TEST(Batching, RaggedStepsMatchOneSequenceOnTheCpu) { ExpectRaggedStepsMatch("cpu"); }
// A server's split: prompts on one device, generation on another, the pool's rows handed over per block.
TEST(Batching, RaggedStepsMatchWithPromptsOnTheCpuAndGenerationOnTheSystolicSystem) {
  ExpectRaggedStepsMatch("systolic:quad-f32", "cpu");
}
TEST(Batching, RaggedStepsMatchWithPromptsOnTheSystolicSystemAndGenerationOnTheCpu) {
  ExpectRaggedStepsMatch("cpu", "systolic:quad-f32");
}

// On the CPU, each layer's paged attention is matched to the fused template (which the ragged-step test
// above then runs: it is the default where AVX-512 is present), and reading its block table and positions.
TEST(Batching, PagedAttentionMatchesTheFusedTemplate) {
  auto lm = LanguageModel::Load(kModel, Batched("cpu", 4, 40));
  const KernelProgram& kp = lm->step_as<Program>().kernels();
  int paged = 0;
  for (const Kernel& k : kp.kernels)
    if (k.attention) {
      ASSERT_GE(k.attention->table_buffer, 0) << k.name;
      EXPECT_EQ(kp.buffers[k.attention->table_buffer].name, "block_table");
      EXPECT_EQ(kp.buffers[k.attention->positions_buffer].name, "positions");
      EXPECT_EQ(k.attention->block, 4);
      paged++;
    }
  EXPECT_EQ(paged, lm->config().num_layers);
  // The search checks the template against the kernel evaluated in double, on random tables and
  // positions, before timing it: it must pass in every bucket.
  testing::FreshCache cache("batching-search", "cache");
  int checked = 0;
  for (const auto& r : lm->Tune(60))
    for (const auto& c : r.value("candidates", nlohmann::json::array()))
      if (c.value("candidate", "").rfind("template-attention", 0) == 0) {
        EXPECT_TRUE(c["passed"].get<bool>()) << r.dump();
        checked++;
      }
  // Decode, batch and prefill (layers alike share one decision), where AVX-512 offers the template.
  if (AttentionTemplateSupported()) {
    EXPECT_GE(checked, 3);
  }
  ExpectRaggedStepsMatch("cpu");  // the searched choices give the one-sequence logits too
}
TEST(Batching, RaggedStepsMatchOneSequenceOnOpenCl) {
  try {
    OpenDevice("opencl");
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  ExpectRaggedStepsMatch("opencl");
}
// GPU pools handed over by row offsets: prompts on the GPU, generation on the CPU, and the reverse.
void ExpectGpuSplit(const std::string& gpu) {
  try {
    OpenDevice(gpu);
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  ExpectRaggedStepsMatch("cpu", gpu);
  ExpectRaggedStepsMatch(gpu, "cpu");
}
TEST(Batching, RaggedStepsMatchWithPromptsOnOpenClOrTheCpu) { ExpectGpuSplit("opencl"); }
TEST(Batching, RaggedStepsMatchWithPromptsOnCudaOrTheCpu) { ExpectGpuSplit("cuda"); }

// Greedy decode of every reference prompt at once, one token per sequence per step: each text is the
// published reference continuation.
TEST(Batching, GreedyTextOfManySequencesAtOnceMatchesTheReference) {
  auto lm = LanguageModel::Load(kModel, Batched("cpu", 8, 200));
  auto refs = testing::StoriesReferences();
  struct Seq {
    std::vector<int32_t> ids, blocks;
    size_t prompt = 0;
    std::string want;
  };
  std::vector<Seq> seqs;
  int32_t next_block = 0;
  for (const auto& ref : refs) {
    Seq s;
    s.ids = lm->tokenizer().Encode(ref["prompt"].get<std::string>(), true);
    s.prompt = s.ids.size();
    s.want = ref["greedy_text"].get<std::string>();
    while (!s.want.empty() && s.want.back() == '\n') s.want.pop_back();
    for (int b = 0; b < 24; ++b) s.blocks.push_back(next_block++);
    seqs.push_back(s);
  }
  ASSERT_LE(next_block, 200);
  std::vector<size_t> done_at(seqs.size(), 0);
  for (int step = 0; step < 150; ++step) {
    std::vector<BatchPiece> pieces;
    for (Seq& s : seqs) {
      const int64_t start = step == 0 ? 0 : (int64_t)s.ids.size() - 1;
      pieces.push_back({std::span<const int32_t>(s.ids).subspan(start), start, s.blocks, true});
    }
    auto logits = lm->StepBatch(pieces);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& l = logits[i];
      seqs[i].ids.push_back((int32_t)(std::max_element(l.begin(), l.end()) - l.begin()));
    }
  }
  for (Seq& s : seqs) {
    std::vector<int32_t> gen(s.ids.begin() + (ptrdiff_t)s.prompt, s.ids.end());
    auto eos = std::find(gen.begin(), gen.end(), lm->tokenizer().EosId());
    gen.erase(eos, gen.end());
    const std::string prompt = refs[&s - seqs.data()]["prompt"];
    const std::string got = prompt + lm->tokenizer().Decode(gen, true);
    const size_t n = std::min(got.size(), s.want.size());
    EXPECT_GT(n, prompt.size() + 100);
    EXPECT_EQ(got.substr(0, n), s.want.substr(0, n)) << "prompt '" << prompt << "'";
  }
}

}  // namespace
}  // namespace prism
