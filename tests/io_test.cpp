// Tests for src/io/formats (safetensors, GGUF, llama2.c loaders) and the families' config readers
// (src/models/family.h: config.json, GGUF metadata and tensor names).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "io/formats/expert_stack.h"
#include "io/formats/gguf.h"
#include "io/formats/llama2c.h"
#include "io/formats/mapped_file.h"
#include "io/formats/model_config.h"
#include "io/formats/safetensors.h"
#include "io/formats/weights.h"
#include "ir/error.h"
#include "models/family.h"
#include "test_util.h"

namespace prism {
namespace {

namespace fs = std::filesystem;

const std::string kStoriesDir = std::string(PRISM_SOURCE_DIR) + "/models/stories260K";
const std::string kStoriesBin = kStoriesDir + "/stories260K.bin";
const std::string kStoriesGguf = kStoriesDir + "/stories260K.gguf";

// A temp folder removed when the test ends.
struct TempDir {
  fs::path path = testing::MakeTempDir("io");
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs f, expecting a prism::Error whose message holds every one of `parts`.
void ExpectError(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\n  lacks: " << p;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
  }
}

std::vector<float> ReadFloats(const std::string& path) {
  std::string bytes = ReadBytes(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::string Bytes(const TensorData& t) {
  return std::string(static_cast<const char*>(t.data), static_cast<size_t>(t.nbytes));
}

// ---- little-endian byte builders for hand-made (often broken) files ----

template <typename T>
void Put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutStr(std::string& s, const std::string& v) {
  Put<uint64_t>(s, v.size());
  s += v;
}

std::string KvU32(const std::string& key, uint32_t v) {
  std::string s;
  PutStr(s, key);
  Put<uint32_t>(s, 4);
  Put(s, v);
  return s;
}
std::string KvString(const std::string& key, const std::string& v) {
  std::string s;
  PutStr(s, key);
  Put<uint32_t>(s, 8);
  PutStr(s, v);
  return s;
}
std::string KvRaw(const std::string& key, uint32_t type, const std::string& payload) {
  std::string s;
  PutStr(s, key);
  Put(s, type);
  return s + payload;
}

struct MiniGguf {
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;  // innermost first, as GGUF stores it
    uint32_t type;
    uint64_t offset;
  };
  uint32_t version = 3;
  std::vector<std::string> kvs = {KvString("general.architecture", "llama")};
  std::vector<Tensor> tensors;
  uint64_t alignment = 32;
  std::string data;
  std::optional<uint64_t> tensor_count, kv_count;  // lie about the counts

  std::string Build() const {
    std::string s = "GGUF";
    Put(s, version);
    Put<uint64_t>(s, tensor_count.value_or(tensors.size()));
    Put<uint64_t>(s, kv_count.value_or(kvs.size()));
    for (const std::string& kv : kvs) s += kv;
    for (const Tensor& t : tensors) {
      PutStr(s, t.name);
      Put<uint32_t>(s, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) Put(s, n);
      Put(s, t.type);
      Put(s, t.offset);
    }
    s.resize((s.size() + alignment - 1) / alignment * alignment, '\0');
    return s + data;
  }
};

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string SafetensorsBytes(const std::string& header, const std::string& data) {
  std::string s;
  Put<uint64_t>(s, header.size());
  return s + header + data;
}

// ---- python-written fixtures, generated once for the whole binary ----

class FixtureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("python3 -c 'import numpy, safetensors, gguf' >/dev/null 2>&1") != 0) {
      skip_reason_ = "python3 with numpy, safetensors and gguf is not available";
      return;
    }
    dir_ = new TempDir;
    const std::string cmd = "python3 " + std::string(PRISM_SOURCE_DIR) +
                            "/tests/fixtures/make_io_fixtures.py " + dir_->path.string();
    if (std::system(cmd.c_str()) != 0) skip_reason_ = "fixture script failed: " + cmd;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }
  static std::string Path(const std::string& name) { return (*dir_) / name; }

  static inline TempDir* dir_ = nullptr;
  static inline std::string skip_reason_;
};

// =============================== MappedFile ===============================

TEST(MappedFileTest, MapsWholeFileAndEmptyFile) {
  TempDir tmp;
  WriteBytes(tmp / "a.bin", "hello");
  MappedFile f(tmp / "a.bin");
  ASSERT_EQ(f.size(), 5);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), 5), "hello");
  MappedFile moved = std::move(f);
  EXPECT_EQ(moved.size(), 5);
  EXPECT_EQ(f.data(), nullptr);

  WriteBytes(tmp / "empty.bin", "");
  MappedFile empty(tmp / "empty.bin");
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(MappedFileTest, MissingFileAndFolderAreErrors) {
  TempDir tmp;
  ExpectError([&] { MappedFile f(tmp / "nope.bin"); }, {"nope.bin", "cannot open"});
  ExpectError([&] { MappedFile f(tmp.path.string()); }, {tmp.path.string(), "not a regular file"});
}

// ================================ llama2.c ================================

TEST(Llama2cTest, Stories260KConfigMatchesCard) {
  ModelConfig c;
  auto store = LoadLlama2c(kStoriesBin, &c);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position, 512);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(store->Format(), "llama2c");
  EXPECT_EQ(store->Source(), kStoriesBin);
}

TEST(Llama2cTest, Stories260KTensorsHaveHfNamesAndShapes) {
  auto store = LoadLlama2c(kStoriesBin, nullptr);
  EXPECT_EQ(store->Tensors().size(), 1u + 5 * 9 + 2);
  auto shape = [&](const std::string& n) { return store->Get(n).shape; };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape("model.embed_tokens.weight"), (S{512, 64}));
  for (int l = 0; l < 5; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(shape(p + "input_layernorm.weight"), (S{64}));
    EXPECT_EQ(shape(p + "self_attn.q_proj.weight"), (S{64, 64}));
    EXPECT_EQ(shape(p + "self_attn.k_proj.weight"), (S{32, 64}));
    EXPECT_EQ(shape(p + "self_attn.v_proj.weight"), (S{32, 64}));
    EXPECT_EQ(shape(p + "self_attn.o_proj.weight"), (S{64, 64}));
    EXPECT_EQ(shape(p + "post_attention_layernorm.weight"), (S{64}));
    EXPECT_EQ(shape(p + "mlp.gate_proj.weight"), (S{172, 64}));
    EXPECT_EQ(shape(p + "mlp.up_proj.weight"), (S{172, 64}));
    EXPECT_EQ(shape(p + "mlp.down_proj.weight"), (S{64, 172}));
  }
  EXPECT_EQ(shape("model.norm.weight"), (S{64}));
  for (const TensorData& t : store->Tensors()) {
    EXPECT_EQ(t.dtype, DType::F32) << t.name;
    int64_t n;
    ASSERT_TRUE(CheckedElementCount(t.shape, &n));
    EXPECT_EQ(t.nbytes, n * 4) << t.name;
  }
  // Shared classifier: lm_head is the embedding, not a copy.
  EXPECT_EQ(store->Get("lm_head.weight").data, store->Get("model.embed_tokens.weight").data);
  EXPECT_EQ(store->Find("model.layers.5.self_attn.q_proj.weight"), nullptr);
  ExpectError([&] { store->Get("model.layers.9.mlp.up_proj.weight"); },
              {"stories260K.bin", "missing tensor 'model.layers.9.mlp.up_proj.weight'"});
}

// Reads float i of the stacked array that starts `floats_before` floats after the header.
float FileFloat(const std::string& bytes, int64_t floats_before, int64_t i) {
  float v;
  std::memcpy(&v, bytes.data() + 28 + (floats_before + i) * 4, 4);
  return v;
}

TEST(Llama2cTest, Stories260KValuesMatchRunCLayout) {
  auto store = LoadLlama2c(kStoriesBin, nullptr);
  const std::string file = ReadBytes(kStoriesBin);
  const int64_t d = 64, h = 172, L = 5, V = 512, kv = 32;
  // Offsets (in floats) of each stacked array, written out independently of the loader.
  const int64_t emb = 0, rms_att = emb + V * d, wq = rms_att + L * d, wk = wq + L * d * d;
  const int64_t wv = wk + L * kv * d, wo = wv + L * kv * d, rms_ffn = wo + L * d * d;
  const int64_t w1 = rms_ffn + L * d, w2 = w1 + L * h * d, w3 = w2 + L * d * h;
  const int64_t rms_final = w3 + L * h * d;
  auto at = [&](const std::string& name, int64_t i) {
    return static_cast<const float*>(store->Get(name).data)[i];
  };
  EXPECT_EQ(at("model.embed_tokens.weight", 3 * d + 5), FileFloat(file, emb, 3 * d + 5));
  EXPECT_EQ(at("model.layers.2.input_layernorm.weight", 7), FileFloat(file, rms_att, 2 * d + 7));
  EXPECT_EQ(at("model.layers.4.self_attn.q_proj.weight", 9 * d + 1),
            FileFloat(file, wq, 4 * d * d + 9 * d + 1));
  EXPECT_EQ(at("model.layers.1.self_attn.k_proj.weight", 31 * d + 63),
            FileFloat(file, wk, kv * d + 31 * d + 63));
  EXPECT_EQ(at("model.layers.3.self_attn.v_proj.weight", 5), FileFloat(file, wv, 3 * kv * d + 5));
  EXPECT_EQ(at("model.layers.0.self_attn.o_proj.weight", 100), FileFloat(file, wo, 100));
  EXPECT_EQ(at("model.layers.4.post_attention_layernorm.weight", 63), FileFloat(file, rms_ffn, 4 * d + 63));
  EXPECT_EQ(at("model.layers.2.mlp.gate_proj.weight", 171 * d), FileFloat(file, w1, 2 * h * d + 171 * d));
  EXPECT_EQ(at("model.layers.3.mlp.down_proj.weight", 10 * h + 171),
            FileFloat(file, w2, 3 * d * h + 10 * h + 171));
  EXPECT_EQ(at("model.layers.4.mlp.up_proj.weight", h * d - 1), FileFloat(file, w3, 5 * h * d - 1));
  EXPECT_EQ(at("model.norm.weight", 0), FileFloat(file, rms_final, 0));
  // RMS-norm weights of a trained model hover around 1; the embeddings do not.
  EXPECT_GT(at("model.norm.weight", 0), 0.2f);
}

TEST(Llama2cTest, MatchesTheGgufCopyTensorForTensor) {
  auto bin = LoadLlama2c(kStoriesBin, nullptr);
  auto gguf = HfNamedView(LoadGguf(kStoriesGguf));
  // Both files keep llama2.c's interleaved Q/K rows, so every tensor, Q/K included, is equal.
  for (const TensorData& t : bin->Tensors()) {
    const TensorData& g = gguf->Get(t.name);
    EXPECT_EQ(g.shape, t.shape) << t.name;
    EXPECT_EQ(g.dtype, DType::F32) << t.name;
    EXPECT_TRUE(Bytes(g) == Bytes(t)) << t.name;
  }
}

TEST(Llama2cTest, UnsharedClassifierGetsItsOwnTensor) {
  TempDir tmp;
  // dim 4, hidden 6, 1 layer, 2 heads, 1 kv head, vocab -3 (unshared), seq_len 2.
  const int64_t d = 4, h = 6, V = 3, S = 2, kv = 2;
  const int64_t floats = V * d + d + d * d + 2 * kv * d + d * d + d + 3 * h * d + d + 2 * S * 1 + V * d;
  std::string s;
  for (int32_t v : {4, 6, 1, 2, 1, -3, 2}) Put(s, v);
  std::vector<float> w(floats);
  for (int64_t i = 0; i < floats; ++i) w[i] = static_cast<float>(i);
  WriteBytes(tmp / "tiny.bin", s + FloatBytes(w));
  ModelConfig c;
  auto store = LoadLlama2c(tmp / "tiny.bin", &c);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 3);
  const TensorData& head = store->Get("lm_head.weight");
  EXPECT_EQ(head.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(static_cast<const float*>(head.data)[0], static_cast<float>(floats - V * d));
  EXPECT_EQ(store->Get("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{2, 4}));
}

TEST(Llama2cTest, SizeMismatchTruncationAndBadHeaderAreErrors) {
  TempDir tmp;
  const std::string file = ReadBytes(kStoriesBin);
  WriteBytes(tmp / "short.bin", file.substr(0, file.size() - 4));
  ExpectError([&] { LoadLlama2c(tmp / "short.bin", nullptr); },
              {"short.bin", "file size 1056536 bytes does not match", "needs 1056540 bytes"});
  WriteBytes(tmp / "long.bin", file + "abcd");
  ExpectError([&] { LoadLlama2c(tmp / "long.bin", nullptr); }, {"long.bin", "does not match"});
  WriteBytes(tmp / "header.bin", file.substr(0, 10));
  ExpectError([&] { LoadLlama2c(tmp / "header.bin", nullptr); }, {"header.bin", "truncated"});
  std::string bad = file;
  int32_t zero_heads = 0;
  std::memcpy(bad.data() + 12, &zero_heads, 4);
  WriteBytes(tmp / "heads.bin", bad);
  ExpectError([&] { LoadLlama2c(tmp / "heads.bin", nullptr); }, {"heads.bin", "implausible llama2.c header"});
  ExpectError([&] { LoadLlama2c(tmp / "absent.bin", nullptr); }, {"absent.bin", "cannot open"});
}

// ================================== GGUF ==================================

TEST(GgufTest, Stories260KMetadataAndTensors) {
  auto g = LoadGguf(kStoriesGguf);
  EXPECT_EQ(g->Version(), 3u);
  EXPECT_EQ(g->Alignment(), 32u);
  EXPECT_EQ(g->Format(), "gguf");
  const nlohmann::json& m = g->Metadata();
  EXPECT_EQ(m.at("general.architecture"), "llama");
  ASSERT_TRUE(m.at("tokenizer.ggml.tokens").is_array());
  EXPECT_EQ(m.at("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_TRUE(m.at("tokenizer.ggml.tokens")[100].is_string());
  EXPECT_EQ(m.at("tokenizer.ggml.scores").size(), 512u);
  EXPECT_TRUE(m.at("tokenizer.ggml.scores")[5].is_number_float());
  EXPECT_TRUE(m.at("tokenizer.ggml.token_type")[0].is_number_integer());
  EXPECT_EQ(m.at("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(m.at("llama.block_count"), 5);
  EXPECT_NEAR(m.at("llama.attention.layer_norm_rms_epsilon").get<double>(), 1e-5, 1e-12);

  EXPECT_EQ(g->Tensors().size(), 48u);
  EXPECT_EQ(g->Tensors()[0].name, "token_embd.weight");
  EXPECT_EQ(g->Get("token_embd.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(g->Get("blk.0.attn_k.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(g->Get("blk.4.ffn_down.weight").shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(g->GgmlType("blk.0.attn_q.weight"), 0u);
  for (const TensorData& t : g->Tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;
  ExpectError([&] { g->Get("blk.0.attn_qkv.weight"); },
              {"stories260K.gguf", "missing tensor 'blk.0.attn_qkv.weight'"});
}

TEST(GgufTest, Stories260KConfig) {
  auto g = LoadGguf(kStoriesGguf);
  ModelConfig c = ConfigFromGguf(*g);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position, 2048);  // the GGUF copy declares a longer context than seq_len
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-12);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_FALSE(c.tie_word_embeddings);  // this file carries output.weight
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
}

TEST(GgufTest, TruncatedAnywhereIsAnError) {
  TempDir tmp;
  const std::string file = ReadBytes(kStoriesGguf);
  // Inside: magic, version, counts, first key, the tokenizer arrays, tensor infos, padding,
  // the data section, and the last byte.
  for (size_t cut : {size_t{0}, size_t{3}, size_t{6}, size_t{20}, size_t{30}, size_t{100}, size_t{5000},
                     size_t{13000}, size_t{14170}, size_t{14200}, size_t{600000}, file.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::string path = tmp / ("cut" + std::to_string(cut) + ".gguf");
    WriteBytes(path, file.substr(0, cut));
    try {
      LoadGguf(path);
      ADD_FAILURE() << "loaded a file cut at " << cut;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                  msg.find("past end of file") != std::string::npos)
          << msg;
    }
  }
}

TEST(GgufTest, BadMagicAndVersions) {
  TempDir tmp;
  std::string file = ReadBytes(kStoriesGguf);
  std::string bad = file;
  bad[0] = 'X';
  WriteBytes(tmp / "magic.gguf", bad);
  ExpectError([&] { LoadGguf(tmp / "magic.gguf"); }, {"magic.gguf", "not a GGUF file (bad magic)"});
  for (uint32_t v : {1u, 4u, 0x03000000u}) {
    bad = file;
    std::memcpy(bad.data() + 4, &v, 4);
    WriteBytes(tmp / "version.gguf", bad);
    ExpectError([&] { LoadGguf(tmp / "version.gguf"); },
                {"version.gguf", "unsupported GGUF version " + std::to_string(v)});
  }
}

TEST(GgufTest, HandMadeV2FileLoads) {
  TempDir tmp;
  MiniGguf g;
  g.version = 2;
  g.kvs.push_back(KvRaw("neg", 11, std::string("\xfb\xff\xff\xff\xff\xff\xff\xff", 8)));  // int64 -5
  std::string arr;
  Put<uint32_t>(arr, 9);  // array of arrays of u8
  Put<uint64_t>(arr, 1);
  Put<uint32_t>(arr, 0);
  Put<uint64_t>(arr, 2);
  arr += "\x07\x08";
  g.kvs.push_back(KvRaw("nested", 9, arr));
  g.tensors = {{"a", {3, 2}, 0, 0}, {"b", {2}, 1, 32}};
  g.data = FloatBytes({1, 2, 3, 4, 5, 6});
  g.data.resize(32, '\0');
  Put<uint16_t>(g.data, FloatToHalf(1.5f));
  Put<uint16_t>(g.data, FloatToHalf(-2.0f));
  WriteBytes(tmp / "v2.gguf", g.Build());
  auto f = LoadGguf(tmp / "v2.gguf");
  EXPECT_EQ(f->Version(), 2u);
  EXPECT_EQ(f->Metadata().at("neg"), -5);
  EXPECT_EQ(f->Metadata().at("nested"), nlohmann::json::parse("[[7, 8]]"));
  const TensorData& a = f->Get("a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(static_cast<const float*>(a.data)[5], 6.0f);
  const TensorData& b = f->Get("b");
  EXPECT_EQ(b.dtype, DType::F16);
  EXPECT_EQ(LoadAsDouble(b.data, DType::F16, 1), -2.0);
}

TEST(GgufTest, HandMadeBrokenFilesAreErrors) {
  TempDir tmp;
  int n = 0;
  auto expect = [&](const MiniGguf& g, const std::string& problem) {
    const std::string path = tmp / ("broken" + std::to_string(n++) + ".gguf");
    WriteBytes(path, g.Build());
    SCOPED_TRACE(problem);
    ExpectError([&] { LoadGguf(path); }, {path, problem});
  };
  const MiniGguf ok = [] {
    MiniGguf g;
    g.tensors = {{"w", {4}, 0, 0}};
    g.data = FloatBytes({1, 2, 3, 4});
    return g;
  }();
  MiniGguf g = ok;
  g.kvs.push_back(KvRaw("long", 8, std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8)));
  expect(g, "'long'");
  g = ok;
  g.kvs.push_back(KvRaw("weird", 13, ""));
  expect(g, "key 'weird' has unknown value type 13");
  g = ok;
  g.kvs.push_back(KvRaw("flag", 7, "\x02"));
  expect(g, "key 'flag' has bool value 2");
  g = ok;
  g.kvs.push_back(KvString("general.architecture", "gpt2"));
  expect(g, "duplicate metadata key 'general.architecture'");
  g = ok;
  g.tensor_count = uint64_t{1} << 60;
  expect(g, "tensor count");
  g = ok;
  g.kv_count = uint64_t{1} << 40;
  expect(g, "metadata count");
  g = ok;
  std::string huge_array;
  Put<uint32_t>(huge_array, 4);
  Put<uint64_t>(huge_array, uint64_t{1} << 50);
  g.kvs.push_back(KvRaw("arr", 9, huge_array));
  expect(g, "array 'arr' claims");
  g = ok;
  g.tensors[0].ne = {1, 1, 1, 1, 4};
  expect(g, "tensor 'w' has 5 dimensions");
  g = ok;
  g.tensors[0].offset = 4;
  expect(g, "tensor 'w' has offset 4 not aligned");
  g = ok;
  g.tensors[0].offset = 1024;
  expect(g, "tensor 'w' extends past end of file");
  g = ok;
  g.tensors[0].ne = {8};
  expect(g, "tensor 'w' extends past end of file (offset 128 + 32 > 144 bytes)");
  g = ok;
  g.tensors[0].ne = {uint64_t{1} << 40, uint64_t{1} << 40};
  expect(g, "overflows");
  g = ok;
  g.tensors.push_back(g.tensors[0]);
  expect(g, "duplicate tensor 'w'");
  g = ok;
  g.tensors[0].type = 8;  // Q8_0 with 4 elements per row
  expect(g, "not a multiple of 32");
  g = ok;
  g.kvs.push_back(KvU32("general.alignment", 24));
  expect(g, "general.alignment must be a power of two");
}

// ============================ python fixtures =============================

TEST_F(FixtureTest, SafetensorsSingleFileAndFolder) {
  for (const std::string& path : {Path("single.safetensors"), Path("folder")}) {
    SCOPED_TRACE(path);
    auto s = LoadSafetensors(path);
    EXPECT_EQ(s->Source(), path);
    EXPECT_EQ(s->Format(), "safetensors");
    EXPECT_EQ(s->Tensors().size(), 5u);
    const TensorData& f32 = s->Get("w.f32");
    EXPECT_EQ(f32.dtype, DType::F32);
    EXPECT_EQ(f32.shape, (std::vector<int64_t>{3, 4}));
    const TensorData& f16 = s->Get("w.f16");
    EXPECT_EQ(f16.dtype, DType::F16);
    EXPECT_EQ(f16.shape, (std::vector<int64_t>{2, 5}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(LoadAsDouble(f32.data, DType::F32, i), i * 0.25 - 1.0);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(LoadAsDouble(f16.data, DType::F16, i), i * 0.5 - 2.0);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(LoadAsDouble(s->Get("w.i32").data, DType::I32, i), i * 1000 - 7);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(LoadAsDouble(s->Get("w.u8").data, DType::U8, i), i * 40);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(LoadAsDouble(s->Get("w.i8").data, DType::I8, i), 20 - 50 * i);
    ExpectError([&] { s->Get("w.f64"); }, {path, "missing tensor 'w.f64'"});
  }
}

TEST_F(FixtureTest, SafetensorsBf16AndUnsupportedDtype) {
  const std::string path = Path("bf16.safetensors");
  auto s = LoadSafetensors(path);
  const TensorData& bf = s->Get("w.bf16");
  EXPECT_EQ(bf.dtype, DType::BF16);
  EXPECT_EQ(bf.shape, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(LoadAsDouble(bf.data, DType::BF16, i), i * 0.5 - 1.0);
  ASSERT_EQ(s->Tensors().size(), 1u);
  EXPECT_EQ(s->Unsupported().count("w.f64"), 1u);
  ExpectError([&] { s->Get("w.f64"); }, {"bf16.safetensors", "tensor 'w.f64' has dtype F64", "not support"});
  ExpectError([&] { s->Find("w.f64"); }, {"bf16.safetensors", "F64"});
}

TEST_F(FixtureTest, SafetensorsShardedSet) {
  const std::string folder = Path("sharded");
  auto s = LoadSafetensors(folder);
  EXPECT_EQ(s->Tensors().size(), 3u);
  const TensorData& l1 = s->Get("layers.1.w");
  EXPECT_EQ(l1.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(static_cast<const float*>(l1.data)[4], -4.0f);
  EXPECT_EQ(static_cast<const float*>(s->Get("layers.0.w").data)[5], 5.0f);
  EXPECT_EQ(LoadAsDouble(s->Get("norm.w").data, DType::F16, 2), 1.0);
}

TEST_F(FixtureTest, SafetensorsTruncatedAnywhereIsAnError) {
  TempDir tmp;
  const std::string file = ReadBytes(Path("single.safetensors"));
  for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, size_t{40}, file.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::string path = tmp / ("cut" + std::to_string(cut) + ".safetensors");
    WriteBytes(path, file.substr(0, cut));
    try {
      LoadSafetensors(path);
      ADD_FAILURE() << "loaded a file cut at " << cut;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                  msg.find("past end of file") != std::string::npos)
          << msg;
    }
  }
}

TEST_F(FixtureTest, GgufQuantizedTensorsMatchNumpy) {
  auto g = LoadGguf(Path("quant.gguf"));
  EXPECT_EQ(g->Alignment(), 64u);
  for (const TensorData& t : g->Tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;

  const TensorData& f32 = g->Get("f32.weight");
  EXPECT_EQ(f32.shape, (std::vector<int64_t>{4, 8}));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(LoadAsDouble(f32.data, DType::F32, i), i * 0.125 - 2.0);
  const TensorData& f16 = g->Get("f16.weight");
  EXPECT_EQ(f16.dtype, DType::F16);
  EXPECT_EQ(f16.shape, (std::vector<int64_t>{2, 32}));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(LoadAsDouble(f16.data, DType::F16, i), i * 0.25 - 8.0);

  struct Case {
    const char* name;
    DType dtype;
    float (*dequant)(const void*, int64_t);
  };
  for (const Case& c : {Case{"q8", DType::Q8_0, DequantQ8_0}, Case{"q4", DType::Q4_0, DequantQ4_0}}) {
    SCOPED_TRACE(c.name);
    const TensorData& q = g->Get(std::string(c.name) + ".weight");
    EXPECT_EQ(q.dtype, c.dtype);
    EXPECT_EQ(q.shape, (std::vector<int64_t>{4, 64}));
    EXPECT_EQ(q.nbytes, StorageBytes(c.dtype, 256));
    EXPECT_TRUE(Bytes(q) == ReadBytes(Path(std::string(c.name) + ".raw")));
    const std::vector<float> expected = ReadFloats(Path(std::string(c.name) + ".deq.f32"));
    ASSERT_EQ(expected.size(), 256u);
    for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(c.dequant(q.data, i), expected[i]) << i;
  }

  // The formats read but not written, against gguf.quants' dequantizers bit for bit.
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    const std::string name(DTypeName(t));
    SCOPED_TRACE(name);
    const TensorData& q = g->Get(name + ".weight");
    const int64_t n = 6 * BlockElems(t);
    EXPECT_EQ(q.dtype, t);
    EXPECT_EQ(q.shape, (std::vector<int64_t>{2, n / 2}));
    EXPECT_EQ(q.nbytes, StorageBytes(t, n));
    EXPECT_TRUE(Bytes(q) == ReadBytes(Path(name + ".raw")));
    const std::vector<float> expected = ReadFloats(Path(name + ".deq.f32"));
    ASSERT_EQ((int64_t)expected.size(), n);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ((float)LoadAsDouble(q.data, t, i), expected[i]) << i;
      nonzero += expected[i] != 0;
    }
    EXPECT_GT(nonzero, n / 2);
  }

  // Unsupported ggml types load with the file and fail only when used.
  EXPECT_EQ(g->GgmlType("iq2.weight"), 16u);
  EXPECT_EQ(g->TensorInfos().back().shape, (std::vector<int64_t>{1, 256}));
  ExpectError([&] { g->Get("iq2.weight"); },
              {"quant.gguf", "tensor 'iq2.weight' has ggml type 16 (IQ2_XXS)", "not support"});
  ExpectError([&] { g->GgmlType("nope"); }, {"quant.gguf", "missing tensor 'nope'"});

  const nlohmann::json& m = g->Metadata();
  EXPECT_EQ(m.at("test.string"), "h\xc3\xa9llo");
  EXPECT_EQ(m.at("test.int64"), -5);
  EXPECT_EQ(m.at("test.float64"), 0.125);
  EXPECT_EQ(m.at("test.bool"), true);
  EXPECT_EQ(m.at("test.ints"), nlohmann::json::parse("[1, 2, 3]"));
  EXPECT_EQ(m.at("test.strings"), nlohmann::json::parse(R"(["a", "bc"])"));

  ModelConfig c = ConfigFromGguf(*g);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 500000);
  EXPECT_NEAR(c.norm_eps, 1e-6, 1e-12);
  EXPECT_TRUE(c.tie_word_embeddings);
}

// Random byte corruption must end in a clean load or a prism::Error, never a crash.
TEST_F(FixtureTest, CorruptedBytesNeverCrash) {
  TempDir tmp;
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (const std::string& name : {std::string("quant.gguf"), std::string("single.safetensors")}) {
    const std::string original = ReadBytes(Path(name));
    const std::string path = tmp / ("corrupt-" + name);
    int errors = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::string bytes = original;
      for (int k = 0; k < 3; ++k) bytes[(next() >> 33) % 200] = static_cast<char>(next() >> 56);
      WriteBytes(path, bytes);
      try {
        if (name.ends_with(".gguf")) {
          auto g = LoadGguf(path);
          for (const TensorData& t : g->Tensors()) ASSERT_LE(t.nbytes, static_cast<int64_t>(bytes.size()));
        } else {
          LoadSafetensors(path);
        }
      } catch (const Error& e) {
        ++errors;
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      }
    }
    EXPECT_GT(errors, 0) << name;
  }
}

TEST_F(FixtureTest, Gpt2GgufHfNamesAndConfig) {
  std::shared_ptr<const GgufFile> g = LoadGguf(Path("gpt2.gguf"));
  auto hf = HfNamedView(g);
  using S = std::vector<int64_t>;
  EXPECT_EQ(hf->Get("transformer.wte.weight").shape, (S{10, 8}));
  EXPECT_EQ(hf->Get("transformer.wpe.weight").shape, (S{16, 8}));
  EXPECT_EQ(hf->Get("transformer.h.0.ln_1.bias").shape, (S{8}));
  EXPECT_EQ(hf->Get("transformer.h.0.attn.c_attn.weight").shape, (S{24, 8}));  // [out, in]
  EXPECT_EQ(hf->Get("transformer.h.0.attn.c_attn.bias").shape, (S{24}));
  EXPECT_EQ(hf->Get("transformer.h.0.attn.c_proj.weight").shape, (S{8, 8}));
  EXPECT_EQ(hf->Get("transformer.h.0.mlp.c_fc.weight").shape, (S{32, 8}));
  EXPECT_EQ(hf->Get("transformer.h.0.mlp.c_proj.weight").shape, (S{8, 32}));
  EXPECT_EQ(hf->Get("transformer.h.0.ln_2.weight").shape, (S{8}));
  EXPECT_EQ(hf->Get("transformer.ln_f.bias").shape, (S{8}));
  EXPECT_EQ(static_cast<const float*>(hf->Get("transformer.h.0.mlp.c_fc.weight").data)[0], 10.0f);
  EXPECT_EQ(hf->Get("lm_head.weight").data, hf->Get("transformer.wte.weight").data);
  EXPECT_EQ(hf->Tensors().size(), g->Tensors().size() + 1);
  EXPECT_EQ(hf->Format(), "gguf");

  ModelConfig c = ConfigFromGguf(*g);
  EXPECT_EQ(c.architecture, "gpt2");
  EXPECT_EQ(c.vocab_size, 10);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.max_position, 16);
  EXPECT_EQ(c.hidden_act, "gelu_new");
  EXPECT_FALSE(c.rope_interleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 9);
}

// ======================= safetensors, hand-made errors ======================

TEST(SafetensorsTest, HandMadeBrokenFilesAreErrors) {
  TempDir tmp;
  int n = 0;
  auto expect = [&](const std::string& bytes, const std::string& problem) {
    const std::string path = tmp / ("broken" + std::to_string(n++) + ".safetensors");
    WriteBytes(path, bytes);
    SCOPED_TRACE(problem);
    ExpectError([&] { LoadSafetensors(path); }, {path, problem});
  };
  const std::string data = FloatBytes({1, 2, 3, 4});
  auto entry = [](const std::string& dtype, const std::string& shape, int b, int e) {
    return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[)" + std::to_string(b) +
           "," + std::to_string(e) + "]}";
  };
  std::string len;
  Put<uint64_t>(len, 1000);
  expect(len + "{}", "header length 1000 extends past end of file (8 + 1000 > 10 bytes)");
  expect(SafetensorsBytes("{\"x\": ", data), "header is not valid JSON");
  expect(SafetensorsBytes("[1, 2]", data), "header is not a JSON object");
  expect(SafetensorsBytes(R"({"x": {"shape": [4], "data_offsets": [0, 16]}})", data),
         "tensor 'x': missing or non-string 'dtype'");
  expect(SafetensorsBytes("{\"x\": " + entry("F32", "[4]", 0, 32) + "}", data),
         "tensor 'x' extends past end of file (data_offsets end 32 > 16 bytes");
  expect(SafetensorsBytes("{\"x\": " + entry("F32", "[3]", 0, 16) + "}", data),
         "tensor 'x': holds 16 bytes but shape [3] of F32 needs 12");
  expect(SafetensorsBytes("{\"x\": " + entry("F32", "[0]", 8, 4) + "}", data), "reversed");
  expect(SafetensorsBytes("{\"x\": " + entry("F32", "[-4]", 0, 16) + "}", data),
         "shape entries must be non-negative integers");
  expect(SafetensorsBytes(
             "{\"x\": " + entry("F32", "[2]", 0, 8) + ", \"x\": " + entry("F32", "[2]", 8, 16) + "}", data),
         "duplicate tensor 'x'");
  expect(SafetensorsBytes("{\"x\": " + entry("F16", "[2,4]", 0, 16) + ", \"y\": 5}", data),
         "tensor 'y': header entry is not an object");

  // An unknown dtype is recorded and refused when looked up.
  WriteBytes(tmp / "i64.safetensors",
             SafetensorsBytes("{\"ids\": " + entry("I64", "[2]", 0, 16) + "}", data));
  auto s = LoadSafetensors(tmp / "i64.safetensors");
  ExpectError([&] { s->Get("ids"); }, {"i64.safetensors", "tensor 'ids' has dtype I64"});
  ExpectError([&] { s->Get("other"); }, {"i64.safetensors", "missing tensor 'other'"});
  ExpectError([&] { LoadSafetensors(tmp / "absent.safetensors"); }, {"absent.safetensors", "cannot open"});
}

TEST(SafetensorsTest, ExpertTensorsStackInOrderOrFailInOneLine) {
  TempDir tmp;
  auto expert = [](int e, const std::string& rest, int begin, const char* shape) {
    return "\"m.experts." + std::to_string(e) + "." + rest + "\": {\"dtype\": \"F32\", \"shape\": " + shape +
           ", \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(begin + 8) + "]}";
  };
  const std::string data = FloatBytes({1, 2, 3, 4, 5, 6});
  // Experts 1 then 0 in the file: stacked by number.
  WriteBytes(tmp / "ok.safetensors",
             SafetensorsBytes("{" + expert(1, "w", 0, "[2]") + ", " + expert(0, "w", 8, "[2]") + "}", data));
  auto s = StackExperts(LoadSafetensors(tmp / "ok.safetensors"));
  const TensorData& w = s->Get("m.experts.w");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(LoadAsDouble(w.data, DType::F32, i), (double)((i + 2) % 4 + 1));
  EXPECT_NE(s->Find("m.experts.0.w"), nullptr);  // the experts themselves stay
  WriteBytes(tmp / "gap.safetensors",
             SafetensorsBytes("{" + expert(0, "w", 0, "[2]") + ", " + expert(2, "w", 8, "[2]") + "}", data));
  ExpectError([&] { StackExperts(LoadSafetensors(tmp / "gap.safetensors")); },
              {"gap.safetensors", "'m.experts.2.w' has no expert 1 before it"});
  WriteBytes(tmp / "shape.safetensors",
             SafetensorsBytes("{" + expert(0, "w", 0, "[2]") + ", " + expert(1, "w", 8, "[1, 2]") + "}", data));
  ExpectError([&] { StackExperts(LoadSafetensors(tmp / "shape.safetensors")); },
              {"shape.safetensors", "'m.experts.1.w' [1, 2] f32 differs from 'm.experts.0.w' [2] f32"});
}

TEST(SafetensorsTest, FolderAndIndexErrors) {
  TempDir tmp;
  ExpectError([&] { LoadSafetensors(tmp.path.string()); },
              {tmp.path.string(), "neither model.safetensors nor model.safetensors.index.json"});
  const std::string one = SafetensorsBytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                                           FloatBytes({1, 2}));
  WriteBytes(tmp / "s1.safetensors", one);
  WriteBytes(tmp / "s2.safetensors",
             SafetensorsBytes(R"({"c": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                              FloatBytes({1, 2})));
  WriteBytes(tmp / "s4.safetensors", one);
  const std::string index = tmp / "model.safetensors.index.json";
  WriteBytes(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s3.safetensors"}})");
  ExpectError([&] { LoadSafetensors(tmp.path.string()); }, {"s3.safetensors", "cannot open"});
  WriteBytes(index, R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  ExpectError([&] { LoadSafetensors(tmp.path.string()); },
              {"model.safetensors.index.json",
               "tensor 'b' is mapped to 's2.safetensors', which does not contain it"});
  WriteBytes(index, R"({"weight_map": {"a": "s1.safetensors", "a2": "s4.safetensors"}})");
  ExpectError([&] { LoadSafetensors(tmp.path.string()); }, {tmp.path.string(), "duplicate tensor 'a'"});
  WriteBytes(index, R"({"weight_map": {"a": "../s1.safetensors"}})");
  ExpectError([&] { LoadSafetensors(tmp.path.string()); }, {"model.safetensors.index.json", "invalid file"});
  WriteBytes(index, R"({"metadata": {}})");
  ExpectError([&] { LoadSafetensors(tmp.path.string()); },
              {"model.safetensors.index.json", "missing 'weight_map'"});
}

// ================================ HF names ================================

TEST(HfNamesTest, LlamaFamilyAndGpt2Mapping) {
  EXPECT_EQ(HfTensorName("llama", "token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.0.attn_output.weight"), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.attn_norm.weight"), "model.layers.3.input_layernorm.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.1.ffn_gate.weight"), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.1.ffn_down.weight"), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(HfTensorName("qwen2", "blk.2.attn_v.bias"), "model.layers.2.self_attn.v_proj.bias");
  EXPECT_EQ(HfTensorName("qwen3", "blk.2.attn_k_norm.weight"), "model.layers.2.self_attn.k_norm.weight");
  EXPECT_EQ(HfTensorName("llama", "output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(HfTensorName("llama", "output.weight"), "lm_head.weight");
  EXPECT_EQ(HfTensorName("llama", "rope_freqs.weight"), "rope_freqs.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.x.attn_q.weight"), "blk.x.attn_q.weight");
  EXPECT_EQ(HfTensorName("gpt2", "blk.7.attn_qkv.bias"), "transformer.h.7.attn.c_attn.bias");
  EXPECT_EQ(HfTensorName("gpt2", "output_norm.weight"), "transformer.ln_f.weight");
  // Mixture of experts: stacked experts, the router, and one expert of the older per-expert layout.
  EXPECT_EQ(HfTensorName("qwen3moe", "blk.4.ffn_up_exps.weight"), "model.layers.4.mlp.experts.up_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.4.ffn_gate_inp.weight"), "model.layers.4.mlp.gate.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.ffn_gate.7.weight"), "model.layers.3.mlp.experts.7.gate_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.ffn_down.12.weight"), "model.layers.3.mlp.experts.12.down_proj.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.ffn_gate.x.weight"), "blk.3.ffn_gate.x.weight");
  EXPECT_EQ(HfTensorName("llama", "blk.3.attn_q.7.weight"), "blk.3.attn_q.7.weight");
}

TEST(HfNamesTest, UnknownArchitectureAndUnsupportedTensorsInView) {
  TempDir tmp;
  MiniGguf g;
  g.kvs = {KvString("general.architecture", "falcon")};
  WriteBytes(tmp / "falcon.gguf", g.Build());
  std::shared_ptr<const GgufFile> falcon = LoadGguf(tmp / "falcon.gguf");
  ExpectError([&] { HfNamedView(falcon); }, {"falcon.gguf", "architecture 'falcon'"});
  ExpectError([&] { ConfigFromGguf(*falcon); }, {"falcon.gguf", "unsupported general.architecture 'falcon'"});

  // An IQ2_XXS output.weight (a type Prism does not read) stays unusable under its HF name, and is
  // not mistaken for "tied".
  MiniGguf q;
  q.tensors = {{"token_embd.weight", {4}, 0, 0}, {"output.weight", {256}, 16, 32}};
  q.data = FloatBytes({1, 2, 3, 4});
  q.data.resize(32 + 66, '\0');
  WriteBytes(tmp / "iq2.gguf", q.Build());
  auto view = HfNamedView(LoadGguf(tmp / "iq2.gguf"));
  ExpectError([&] { view->Find("lm_head.weight"); }, {"iq2.gguf", "'output.weight' has ggml type 16 (IQ2_XXS)"});
  EXPECT_NE(view->Find("model.embed_tokens.weight"), nullptr);
}

// ================================ config.json ================================

ModelConfig ParseConfigText(const TempDir& tmp, const std::string& text) {
  WriteBytes(tmp / "config.json", text);
  return ParseHfConfig(tmp / "config.json");
}

TEST(HfConfigTest, LlamaDefaults) {
  TempDir tmp;
  ModelConfig c = ParseConfigText(tmp, R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
    "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "tie_word_embeddings": false})");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_FALSE(c.rope_interleaved);
  EXPECT_EQ(c.rope_factor, 0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));

  c = ParseConfigText(tmp, R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
    "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2})");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.eos_token_id, -1);
}

TEST(HfConfigTest, Llama3RopeScalingAndEosList) {
  TempDir tmp;
  ModelConfig c = ParseConfigText(tmp, R"({"model_type": "llama", "vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": true,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  EXPECT_EQ(c.rope_factor, 32);
  EXPECT_EQ(c.rope_low_freq_factor, 1);
  EXPECT_EQ(c.rope_high_freq_factor, 4);
  EXPECT_EQ(c.rope_original_max_position, 8192);
  EXPECT_EQ(c.rope_theta, 500000);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(HfConfigTest, QwenMistralAndGpt2) {
  TempDir tmp;
  const std::string common = R"("vocab_size": 151936, "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0)";
  ModelConfig q2 = ParseConfigText(tmp, R"({"model_type": "qwen2", )" + common + "}");
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_EQ(q2.head_dim, 64);
  ModelConfig q3 = ParseConfigText(tmp, R"({"model_type": "qwen3", "head_dim": 128, )" + common + "}");
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.rope_theta, 1e6);
  ModelConfig m = ParseConfigText(tmp, R"({"model_type": "mistral", "head_dim": null, )" + common + "}");
  EXPECT_EQ(m.architecture, "mistral");
  EXPECT_EQ(m.head_dim, 64);

  ModelConfig g = ParseConfigText(tmp, R"({"model_type": "gpt2", "vocab_size": 50257,
    "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "n_inner": null,
    "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
    "bos_token_id": 50256, "eos_token_id": 50256})");
  EXPECT_EQ(g.architecture, "gpt2");
  EXPECT_EQ(g.intermediate_size, 3072);
  EXPECT_EQ(g.head_dim, 64);
  EXPECT_EQ(g.num_kv_heads, 12);
  EXPECT_EQ(g.max_position, 1024);
  EXPECT_EQ(g.hidden_act, "gelu_new");
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(g.eos_token_id, 50256);
}

// Gemma 2 and 3 and Phi-3 as their Hub config.json files have them: what each key turns into, and
// the family defaults where a key is absent (soft-capping absent = the default, null = none).
TEST(HfConfigTest, GemmaAndPhi3) {
  TempDir tmp;
  const std::string sizes = R"("vocab_size": 256000, "hidden_size": 4608, "intermediate_size": 36864,
    "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128)";
  ModelConfig g2 = ParseConfigText(tmp, R"({"model_type": "gemma2", "query_pre_attn_scalar": 144,
    "sliding_window": 4096, "final_logit_softcapping": null, )" + sizes + "}");
  EXPECT_EQ(g2.architecture, "gemma2");
  EXPECT_DOUBLE_EQ(g2.attention_scale, 1.0 / 12);  // 27B: 1/sqrt(144), not 1/sqrt(head_dim)
  EXPECT_EQ(g2.attn_softcap, 50);                  // absent: Gemma 2's default
  EXPECT_EQ(g2.final_softcap, 0);                  // null: none
  EXPECT_EQ(g2.sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_DOUBLE_EQ(g2.embed_scale, std::sqrt(4608.0));
  EXPECT_EQ(g2.norm_weight_offset, 1);
  EXPECT_TRUE(g2.sandwich_norms && g2.tie_word_embeddings);
  EXPECT_EQ(g2.hidden_act, "gelu_pytorch_tanh");

  ModelConfig g3 = ParseConfigText(tmp, R"({"model_type": "gemma3_text", "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window_pattern": 2, "sliding_window": 1024, )" + sizes + "}");
  EXPECT_EQ(g3.architecture, "gemma3");
  EXPECT_TRUE(g3.qk_norm);
  EXPECT_EQ(g3.attn_softcap, 0);
  EXPECT_EQ(g3.rope_theta, 1e6);
  EXPECT_EQ(g3.rope_local_theta, 1e4);
  EXPECT_EQ(g3.rope_linear_factor, 8);
  EXPECT_EQ(g3.sliding_window, 1024);
  EXPECT_EQ(g3.sliding_layers, (std::vector<bool>{true, false, true, false}));

  ModelConfig p = ParseConfigText(tmp, R"({"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "sliding_window": 262144, "rope_scaling": {"type": "su",
    "short_factor": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    "long_factor": [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]}})");
  EXPECT_EQ(p.architecture, "phi3");
  EXPECT_EQ(p.rope_short_factor.size(), 48u);
  EXPECT_EQ(p.rope_long_factor[0], 2);
  EXPECT_EQ(p.rope_original_max_position, 4096);
  EXPECT_NEAR(p.rope_attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
  EXPECT_EQ(p.sliding_window, 262144);
  EXPECT_TRUE(p.sliding_layers.empty());  // every layer
}

TEST(HfConfigTest, ErrorsNameTheFileAndTheProblem) {
  TempDir tmp;
  const std::string path = tmp / "config.json";
  auto expect = [&](const std::string& text, const std::vector<std::string>& parts) {
    WriteBytes(path, text);
    std::vector<std::string> all = {path};
    all.insert(all.end(), parts.begin(), parts.end());
    ExpectError([&] { ParseHfConfig(path); }, all);
  };
  expect(R"({"model_type": "t5"})",
         {"unsupported model_type 't5'", "llama, mistral, qwen2, qwen3, mixtral, qwen2moe, qwen3moe, gemma, gemma2, gemma3, phi3, gpt2, bert"});
  expect(R"({"model_type": "bert", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 16, "position_embedding_type": "relative_key"})",
         {"position_embedding_type 'relative_key' is not supported"});
  expect(R"({"architectures": ["T5ForConditionalGeneration"]})", {"no 'model_type'", "supported"});
  expect("{not json", {"not valid JSON"});
  expect(R"({"model_type": "llama", "vocab_size": 10})", {"missing required key 'hidden_size'"});
  expect(R"({"model_type": "llama", "vocab_size": "ten"})", {"'vocab_size' must be an integer"});
  expect(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"rope_type": "yarn"}})",
         {"rope_scaling type 'yarn' is not supported"});
  expect(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2})",
         {"num_heads 3 is not a multiple of num_kv_heads 2"});
  expect(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": "relu"})",
         {"unsupported activation 'relu'"});
  const std::string small = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 4)";
  expect(R"({"model_type": "gemma3", "text_config": {}, )" + small + "}", {"multimodal Gemma 3"});
  expect(R"({"model_type": "gemma3_text", "rope_parameters": {"full_attention": 5}, )" + small + "}",
         {"'rope_parameters' per layer type must hold objects"});
  expect(R"({"model_type": "gemma2", "layer_types": ["sliding_attention"], )" + small + "}",
         {"'layer_types' must list 2 layer types"});
  expect(R"({"model_type": "gemma2", "layer_types": ["sliding_attention", "chunked_attention"], )" + small + "}",
         {"layer type \"chunked_attention\" is not supported"});
  expect(R"({"model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1],
    "long_factor": [1, 2]}, )" + small + "}",
         {"short_factor and long_factor need head_dim / 2 = 2 entries, got 1 and 2"});
  expect(R"({"model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1, "x"],
    "long_factor": [1, 2]}, )" + small + "}",
         {"'short_factor' must be an array of numbers"});
  expect(R"({"model_type": "phi3", "partial_rotary_factor": 0.75, )" + small + "}",
         {"partial_rotary_factor 0.750000 is not supported"});
  ExpectError([&] { ParseHfConfig(tmp / "missing.json"); }, {"missing.json", "cannot open"});
}

}  // namespace
}  // namespace prism
