// Tokenizer tests: parity with HF `tokenizers`, llama2.c reference outputs, GGUF metadata, bad input.
#include "io/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "io/tokenizer/unicode.h"
#include "ir/error.h"
#include "test_util.h"

namespace prism {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kData = PRISM_TEST_DATA_DIR;  // tokenizers/, reference/
const std::string kSource = PRISM_SOURCE_DIR;
const std::string kFixtures = kSource + "/tests/fixtures";

// A temp folder removed when the test ends.
struct ScratchDir {
  explicit ScratchDir(const std::string& tag) : path(testing::MakeTempDir(tag)) {}
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

json ReadJson(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

bool HavePython(const char* module) {
  std::string cmd = std::string("python3 -c 'import ") + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string FileText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// stdout of a shell command, or nullopt when it fails.
std::optional<std::string> CommandOutput(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

// Output of tokenizer_reference.py. ctest runs each test in its own process, so the result is kept in a temp
// folder named after the fixture inputs and the `tokenizers` version, and made only once.
struct HfReference {
  std::string skip;   // why the comparison cannot run
  std::string error;  // the fixture script failed
  fs::path dir;
  json data;
};

const HfReference& Reference() {
  static HfReference ref = [] {
    HfReference r;
    auto version = CommandOutput("python3 -c 'import tokenizers; print(tokenizers.__version__)' 2>/dev/null");
    if (!version) {
      r.skip = "python3 with the `tokenizers` package is not available";
      return r;
    }
    std::string inputs = *version + FileText(kFixtures + "/corpus.txt") +
                         FileText(kFixtures + "/tokenizer_reference.py") +
                         FileText(kFixtures + "/tokenizer_corpus.py");
    r.dir = fs::temp_directory_path() /
            ("prism-tokenizer-ref-" + std::to_string(std::hash<std::string>{}(inputs)));
    if (!fs::exists(r.dir / "reference.json")) {
      fs::path fresh = testing::MakeTempDir("tokenizer-ref");
      std::string cmd = "python3 " + Quote(kFixtures + "/tokenizer_reference.py") + " " + Quote(kData) +
                        " " + Quote(kFixtures + "/corpus.txt") + " " + Quote(fresh.string());
      if (std::system(cmd.c_str()) != 0) {
        r.error = "fixture failed: " + cmd;
        return r;
      }
      std::error_code ec;
      fs::rename(fresh, r.dir, ec);  // fails if a parallel test process got there first: use its copy
      if (ec) fs::remove_all(fresh);
    }
    r.data = ReadJson(r.dir / "reference.json");
    return r;
  }();
  return ref;
}

const json& ReferenceFor(const std::string& name) {
  for (const json& t : Reference().data.at("tokenizers"))
    if (t.at("name") == name) return t;
  throw std::runtime_error("no reference for " + name);
}

// Each tokenizer is loaded once (Qwen2.5's 150k vocab takes a while).
const Tokenizer& Loaded(const std::string& key, const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[key];
  if (!slot) slot = LoadHfTokenizer(path);
  return *slot;
}

const Tokenizer& Shipped(const std::string& name) { return Loaded(name, kData + "/tokenizers/" + name); }

const Tokenizer& Llama2c() {
  static std::unique_ptr<Tokenizer> tok =
      LoadLlama2cTokenizer(kSource + "/models/stories260K/tok512.bin", 512);
  return *tok;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? ", " : "") << ids[i];
  return s.str() + "]";
}

std::string Show(const std::string& text) { return json(text).dump(); }

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// Compares one tokenizer with its reference; reports only the first mismatch of each kind.
void ExpectMatchesReference(const std::string& name, const Tokenizer& tok) {
  const json& ref = ReferenceFor(name);
  EXPECT_EQ(tok.VocabSize(), ref.at("vocab_size").get<int32_t>()) << name;
  std::map<std::string, int> failures;
  auto check = [&](const std::string& what, size_t line, const std::string& text, const auto& expected,
                   const auto& got) {
    if (expected == got || failures[what]++ > 0) return;
    ADD_FAILURE() << "tokenizer " << name << ", case " << line << " " << Show(text) << ": " << what
                  << "\n  expected " << Show(expected) << "\n  got      " << Show(got);
  };
  const json& cases = ref.at("cases");
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    std::string text = c.at("text");
    auto ids = Ids(c.at("ids")), ids_special = Ids(c.at("ids_special"));
    check("Encode(add_special=false)", i, text, ids, tok.Encode(text, false));
    check("Encode(add_special=true)", i, text, ids_special, tok.Encode(text, true));
    check("Decode(ids, skip_special=false)", i, text, c.at("decoded").get<std::string>(),
          tok.Decode(ids, false));
    check("Decode(ids_special, skip_special=false)", i, text, c.at("decoded_special").get<std::string>(),
          tok.Decode(ids_special, false));
    check("Decode(ids_special, skip_special=true)", i, text, c.at("decoded_special_skip").get<std::string>(),
          tok.Decode(ids_special, true));
    // Streaming gives the same text, piece by piece, each piece valid UTF-8.
    for (bool skip : {true, false}) {
      StreamDecoder stream(tok, skip);
      std::string streamed;
      bool valid = true;
      for (int32_t id : ids_special) {
        std::string piece = stream.Push(id);
        valid &= unicode::IsValidUtf8(piece);
        streamed += piece;
      }
      streamed += stream.Flush();
      check(skip ? "StreamDecoder(skip_special=true)" : "StreamDecoder(skip_special=false)", i, text,
            c.at(skip ? "decoded_special_skip" : "decoded_special").get<std::string>(), streamed);
      EXPECT_TRUE(valid) << name << " case " << i << ": a streamed piece is not valid UTF-8";
    }
  }
  const json& decodes = ref.at("decodes");
  for (size_t i = 0; i < decodes.size(); ++i) {
    auto ids = Ids(decodes[i].at("ids"));
    check("Decode(random ids, skip_special=false)", i, Show(ids), decodes[i].at("text").get<std::string>(),
          tok.Decode(ids, false));
    check("Decode(random ids, skip_special=true)", i, Show(ids),
          decodes[i].at("text_skip").get<std::string>(), tok.Decode(ids, true));
  }
}

class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!Reference().skip.empty()) GTEST_SKIP() << Reference().skip;
    ASSERT_TRUE(Reference().error.empty()) << Reference().error;
  }
};

TEST_P(HfParity, MatchesTokenizersLibrary) { ExpectMatchesReference(GetParam(), Shipped(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Shipped, HfParity,
                         ::testing::Values("gpt2", "tinyllama-1.1b-chat", "mistral-7b-instruct-v0.3",
                                           "smollm2", "phi-3-mini", "qwen2.5"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum((unsigned char)c)) c = '_';
                           return s;
                         });

TEST_F(HfParity, SyntheticTokenizersUsingOtherOptions) {
  // Metaspace(always, split) + Metaspace decoder + NFKC + lstrip/rstrip/single_word + ignore_merges + a
  // BOS...EOS template; byte-level BPE behind every Split behaviour, Digits runs and Roberta; Llama 3's
  // layout.
  for (const char* name : {"synthetic-metaspace", "synthetic-bytelevel", "synthetic-llama3"}) {
    ExpectMatchesReference(name, Loaded(name, (Reference().dir / (std::string(name) + ".json")).string()));
  }
}

TEST_F(HfParity, PairFormMergesLoadLikeStringMerges) {
  // tokenizers >= 0.20 saves merges as ["a", "b"]; the re-saved GPT-2 must behave as the original.
  auto resaved = LoadHfTokenizer((Reference().dir / "gpt2-resaved.json").string());
  ExpectMatchesReference("gpt2", *resaved);
}

TEST_F(HfParity, QwenTokenizerJsonMatchesVocabMergesFolder) {
  // The tokenizer.json that transformers would write for Qwen2.5 (NFC + Split regex + pair merges).
  auto from_json = LoadHfTokenizer((Reference().dir / "qwen2.5" / "tokenizer.json").string());
  EXPECT_EQ(from_json->VocabSize(), ReferenceFor("qwen2.5").at("vocab_size").get<int32_t>());
  for (const json& c : ReferenceFor("qwen2.5").at("cases")) {
    std::string text = c.at("text");
    ASSERT_EQ(from_json->Encode(text, true), Ids(c.at("ids_special"))) << Show(text);
  }
}

TEST_F(HfParity, ConcurrentEncodesAgree) {
  // Encode is const and shared across threads (the piece cache is locked, scratch buffers are per thread).
  for (const char* name : {"gpt2", "mistral-7b-instruct-v0.3"}) {
    const Tokenizer& tok = Shipped(name);
    const json& cases = ReferenceFor(name).at("cases");
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 3; ++round)
          for (const json& c : cases)
            mismatches[t] += tok.Encode(c.at("text").get<std::string>(), true) != Ids(c.at("ids_special"));
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << name << " thread " << t;
  }
}

TEST(Tokenizer, ShippedBosEosAndSpecialTokens) {
  struct Want {
    const char* name;
    int32_t bos, eos;
    const char* special;  // the text of one of its special tokens
  };
  for (const Want& w :
       {Want{"gpt2", -1, 50256, "<|endoftext|>"}, Want{"tinyllama-1.1b-chat", 1, 2, "</s>"},
        Want{"mistral-7b-instruct-v0.3", 1, 2, "[INST]"}, Want{"smollm2", 1, 2, "<|im_end|>"},
        Want{"phi-3-mini", 1, 32000, "<|user|>"}, Want{"qwen2.5", -1, 151645, "<|im_start|>"}}) {
    const Tokenizer& tok = Shipped(w.name);
    EXPECT_EQ(tok.BosId(), w.bos) << w.name;
    EXPECT_EQ(tok.EosId(), w.eos) << w.name;
    auto id = tok.TokenId(w.special);
    ASSERT_TRUE(id.has_value()) << w.name;
    EXPECT_TRUE(tok.IsSpecial(*id)) << w.name;
    EXPECT_EQ(tok.TokenText(*id), w.special) << w.name;
    EXPECT_EQ(tok.TokenText(-1), "");
    EXPECT_EQ(tok.TokenText(tok.VocabSize()), "");
  }
  const Tokenizer& gpt2 = Shipped("gpt2");
  EXPECT_EQ(gpt2.TokenId("\xC4\xA0the"), 262);  // "Ġthe": raw vocab strings, byte-level alphabet
  EXPECT_EQ(gpt2.TokenText(262), "\xC4\xA0the");
  EXPECT_FALSE(gpt2.TokenId("no such token").has_value());
  EXPECT_FALSE(Shipped("phi-3-mini").IsSpecial(2));  // "</s>" is added with special: false there
}

TEST(Tokenizer, InvalidUtf8InputIsRepairedNotRejected) {
  const Tokenizer& tok = Shipped("gpt2");
  std::string bad = "ok \xE4\xBD then \xFF end";
  EXPECT_EQ(tok.Decode(tok.Encode(bad, false), false), "ok \xEF\xBF\xBD then \xEF\xBF\xBD end");
}

TEST(Tokenizer, StreamDecoderHoldsPartialCharactersAndKeepsSpaces) {
  const Tokenizer& tok = Shipped("tinyllama-1.1b-chat");
  // The emoji is four byte-fallback tokens; nothing may come out until the last one.
  std::vector<int32_t> ids = tok.Encode("Hi 😀 there", true);
  StreamDecoder stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.Push(id));
  pieces.push_back(stream.Flush());
  std::string joined;
  for (const auto& p : pieces) {
    EXPECT_TRUE(unicode::IsValidUtf8(p)) << Show(p);
    joined += p;
  }
  EXPECT_EQ(joined, "Hi 😀 there");
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), "\xF0\x9F\x98\x80"), pieces.end())
      << "emoji came in parts";
  // Primed with the prompt, a continuation keeps its leading space.
  StreamDecoder primed(tok);
  primed.Prime(tok.Encode("Hi", true));
  EXPECT_EQ(primed.Push(*tok.TokenId("\xE2\x96\x81there")), " there");
}

// llama2.c: tok512.bin must reproduce the stories260K reference prompts and texts.
TEST(Llama2c, ReferencePromptsAndTextsRoundTrip) {
  const Tokenizer& tok = Llama2c();
  EXPECT_EQ(tok.VocabSize(), 512);
  EXPECT_EQ(tok.BosId(), 1);
  EXPECT_EQ(tok.EosId(), 2);
  EXPECT_EQ(tok.TokenText(3), "<0x00>");
  json ref = ReadJson(kData + "/reference/stories260K.json");
  ASSERT_FALSE(ref.empty());
  for (const json& entry : ref) {
    std::string prompt = entry.at("prompt"), text = entry.at("greedy_text");
    std::vector<int32_t> ids = tok.Encode(prompt, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(tok.Decode(ids, true), prompt);
    std::vector<int32_t> text_ids = tok.Encode(text, true);
    EXPECT_LT(text_ids.size(), text.size() / 2) << "merges are not being applied";
    EXPECT_EQ(tok.Decode(text_ids, true), text);
    // Streaming the continuation after the prompt reproduces the text.
    std::vector<int32_t> all = tok.Encode(text, true);
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : all) streamed += stream.Push(id);
    EXPECT_EQ(streamed + stream.Flush(), text);
  }
}

TEST(Llama2c, MatchesRunCEncodeOnCorpus) {
  // tokenizer_llama2c_reference.py is a line-by-line port of run.c's encode().
  ScratchDir scratch("llama2c-ref");
  const fs::path& dir = scratch.path;
  std::string cmd = "python3 " + Quote(kFixtures + "/tokenizer_llama2c_reference.py") + " " +
                    Quote(kSource + "/models/stories260K/tok512.bin") + " " +
                    Quote(kFixtures + "/corpus.txt") + " " + Quote(kData + "/reference/stories260K.json") +
                    " " + Quote((dir / "ref.json").string());
  if (std::system("python3 -c 'pass' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not available";
  }
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Tokenizer& tok = Llama2c();
  int checked = 0;
  for (const json& c : ReadJson(dir / "ref.json")) {
    std::string text = c.at("text");
    std::vector<int32_t> want = Ids(c.at("ids"));
    ASSERT_EQ(tok.Encode(text, true), want) << "text " << Show(text);
    if (unicode::IsValidUtf8(text)) {
      EXPECT_EQ(tok.Decode(want, true), text) << Show(text);
    }
    ++checked;
  }
  EXPECT_GT(checked, 60);
}

// GGUF: stories260K.gguf's embedded tokenizer (SentencePiece, scores) must agree with tok512.bin.
GgufTokenizerData GgufFromJson(const json& j) {
  GgufTokenizerData d;
  d.model = j.at("model");
  d.pre = j.value("pre", "");
  d.tokens = j.at("tokens").get<std::vector<std::string>>();
  if (j.contains("scores")) d.scores = j.at("scores").get<std::vector<float>>();
  if (j.contains("token_type")) d.token_types = j.at("token_type").get<std::vector<int32_t>>();
  if (j.contains("merges")) d.merges = j.at("merges").get<std::vector<std::string>>();
  auto id = [&](const char* key) { return j.contains(key) ? (int32_t)j.at(key).get<int64_t>() : -1; };
  d.bos_id = id("bos_token_id");
  d.eos_id = id("eos_token_id");
  d.unk_id = id("unknown_token_id");
  d.add_bos = j.value("add_bos_token", true);
  return d;
}

TEST(Gguf, Stories260KMatchesLlama2cTokenizer) {
  if (!HavePython("gguf")) GTEST_SKIP() << "python3 with the `gguf` package is not available";
  ScratchDir scratch("gguf-tok");
  const fs::path& dir = scratch.path;
  std::string cmd = "python3 " + Quote(kFixtures + "/tokenizer_gguf_dump.py") + " " +
                    Quote(kSource + "/models/stories260K/stories260K.gguf") + " " +
                    Quote((dir / "tok.json").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto gguf = MakeGgufTokenizer(GgufFromJson(ReadJson(dir / "tok.json")));
  const Tokenizer& ref = Llama2c();
  EXPECT_EQ(gguf->VocabSize(), 512);
  EXPECT_EQ(gguf->BosId(), 1);
  EXPECT_EQ(gguf->EosId(), 2);

  std::vector<std::string> texts;
  {
    std::ifstream f(kFixtures + "/corpus.txt");
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line.rfind("## ", 0) != 0)
        texts.push_back(line);  // escapes stay literal: fine here
  }
  for (const json& entry : ReadJson(kData + "/reference/stories260K.json")) {
    texts.push_back(entry.at("prompt"));
    texts.push_back(entry.at("greedy_text"));
  }
  texts.push_back("");
  int compared = 0;
  for (const std::string& text : texts) {
    // GGUF control tokens written in the text are recognised; llama2.c reads them as plain text.
    if (text.find("<s>") != std::string::npos || text.find("</s>") != std::string::npos ||
        text.find("<unk>") != std::string::npos)
      continue;
    auto want = ref.Encode(text, true);
    ASSERT_EQ(gguf->Encode(text, true), want) << Show(text);
    EXPECT_EQ(gguf->Decode(want, true), ref.Decode(want, true)) << Show(text);
    ++compared;
  }
  EXPECT_GT(compared, 60);
  EXPECT_EQ(gguf->Encode("<s>x", false)[0], 1);
}

// GGUF "gpt2" models: build the metadata from tokenizer.json files and compare with `tokenizers`.
GgufTokenizerData GgufFromTokenizerJson(const fs::path& path, const std::string& pre) {
  json j = ReadJson(path);
  GgufTokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  const json& vocab = j.at("model").at("vocab");
  d.tokens.resize(vocab.size());
  d.token_types.assign(vocab.size(), 1);
  for (const auto& [text, id] : vocab.items()) d.tokens[id.get<size_t>()] = text;
  for (const json& t : j.at("added_tokens"))
    d.token_types[t.at("id").get<size_t>()] = t.at("special") ? 3 : 4;
  for (const json& m : j.at("model").at("merges"))
    d.merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m[0].get<std::string>() + " " + m[1].get<std::string>());
  d.add_bos = false;
  return d;
}

TEST_F(HfParity, GgufByteLevelModelsMatchTokenizersLibrary) {
  struct Case {
    std::string name, pre;
    fs::path path;
  };
  for (const Case& c : {Case{"gpt2", "gpt-2", kData + "/tokenizers/gpt2/tokenizer.json"},
                        Case{"smollm2", "smollm", kData + "/tokenizers/smollm2/tokenizer.json"},
                        Case{"synthetic-llama3", "llama-bpe", Reference().dir / "synthetic-llama3.json"}}) {
    auto tok = MakeGgufTokenizer(GgufFromTokenizerJson(c.path, c.pre));
    for (const json& k : ReferenceFor(c.name).at("cases")) {
      std::string text = k.at("text");
      ASSERT_EQ(tok->Encode(text, false), Ids(k.at("ids"))) << c.name << " " << Show(text);
      ASSERT_EQ(tok->Decode(Ids(k.at("ids")), false), k.at("decoded").get<std::string>()) << c.name;
    }
  }
}

// Bad input: one-line prism::Error naming the file and the problem.
void ExpectError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << parts[0];
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

std::string WriteFile(const fs::path& dir, const std::string& name, const std::string& content) {
  fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << content;
  return p.string();
}

std::string MiniTokenizerJson(const std::string& model_type, const std::string& extra) {
  return R"({"added_tokens": [], )" + extra + R"("model": {"type": ")" + model_type +
         R"(", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
}

TEST(TokenizerErrors, HfFilesMissingCorruptOrUnsupported) {
  ScratchDir scratch("tokenizer-errors");
  const fs::path& dir = scratch.path;
  ExpectError([&] { LoadHfTokenizer((dir / "nope.json").string()); }, {"nope.json", "not found"});
  ExpectError([&] { LoadHfTokenizer(dir.string()); }, {dir.string(), "neither tokenizer.json"});
  std::string bad = WriteFile(dir, "corrupt.json", R"({"model": {"type": "BPE", "vocab": {"a": 0)");
  ExpectError([&] { LoadHfTokenizer(bad); }, {"corrupt.json", "invalid JSON"});
  std::string uni = WriteFile(dir, "unigram.json", MiniTokenizerJson("Unigram", ""));
  ExpectError([&] { LoadHfTokenizer(uni); }, {"unigram.json", "unsupported model type 'Unigram'"});
  std::string pre =
      WriteFile(dir, "pre.json", MiniTokenizerJson("BPE", R"("pre_tokenizer": {"type": "Punctuation"}, )"));
  ExpectError([&] { LoadHfTokenizer(pre); }, {"pre.json", "unsupported pre_tokenizer type 'Punctuation'"});
  std::string norm =
      WriteFile(dir, "norm.json", MiniTokenizerJson("BPE", R"("normalizer": {"type": "Precompiled"}, )"));
  ExpectError([&] { LoadHfTokenizer(norm); }, {"norm.json", "unsupported normalizer type 'Precompiled'"});
  std::string dec =
      WriteFile(dir, "dec.json", MiniTokenizerJson("BPE", R"("decoder": {"type": "CTC"}, )"));
  ExpectError([&] { LoadHfTokenizer(dec); }, {"dec.json", "unsupported decoder type 'CTC'"});
  std::string post =
      WriteFile(dir, "post.json", MiniTokenizerJson("BPE", R"("post_processor": {"type": "Mystery"}, )"));
  ExpectError([&] { LoadHfTokenizer(post); }, {"post.json", "unsupported post_processor type 'Mystery'"});
  std::string merge = WriteFile(
      dir, "merge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  ExpectError([&] { LoadHfTokenizer(merge); }, {"merge.json", "'ab'", "not in the vocab"});
  std::string shape =
      WriteFile(dir, "shape.json", R"({"model": {"type": "BPE", "vocab": [1, 2], "merges": []}})");
  ExpectError([&] { LoadHfTokenizer(shape); }, {"shape.json", "vocab is not an object"});
  // A minimal valid file works: "ab" merges, unknown "c" is dropped (no unk token).
  std::string ok = WriteFile(dir, "ok.json", MiniTokenizerJson("BPE", ""));
  auto tok = LoadHfTokenizer(ok);
  EXPECT_EQ(tok->Encode("abca", false), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(tok->Decode({2, 0}, false), "ab a");  // no decoder: tokens joined by spaces
}

// WordPiece end to end on a hand-made vocab: BERT's normalizer and pre-tokenizer, "##" continuations, the whole
// word as [UNK] when a part is missing, specials around, and the WordPiece decoder's joins and cleanup.
// (tests/python/test_embeddings.py checks encoding against tokenizers on the whole corpus.)
TEST(Tokenizer, WordPieceEncodesAndDecodesAsBert) {
  ScratchDir scratch("wordpiece");
  const std::string path = WriteFile(scratch.path, "tokenizer.json", R"({
    "added_tokens": [{"id": 1, "content": "[CLS]", "special": true}, {"id": 2, "content": "[SEP]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 8,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4, "##s": 5, ",": 6, "!": 7,
                        "un": 8, "##aff": 9, "##able": 10, "cafe": 11, "北": 12}}})");
  auto tok = LoadHfTokenizer(path);
  // Lowercased, accents stripped, punctuation split off, CJK isolated; "zzz" and the 9-letter word are [UNK].
  const std::vector<int32_t> ids = tok->Encode("Héllo,\tWORLDS! unaffable Café北 zzz unaffable", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 6, 4, 5, 7, 0, 11, 12, 0, 0, 2}));
  EXPECT_EQ(tok->Encode("unaffable", true), (std::vector<int32_t>{1, 0, 2}));  // 9 characters: over the limit
  EXPECT_EQ(tok->Encode("unaff", false), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(tok->WithSpecial(std::vector<int32_t>{8, 9}), (std::vector<int32_t>{1, 8, 9, 2}));
  EXPECT_EQ(tok->Decode({1, 3, 6, 4, 5, 7, 8, 9, 10, 2}, true), "hello, worlds! unaffable");
  EXPECT_EQ(tok->Decode({1, 3, 2}, false), "[CLS] hello [SEP]");
}

TEST(TokenizerErrors, Llama2cFilesMissingOrTruncated) {
  ScratchDir scratch("llama2c-errors");
  const fs::path& dir = scratch.path;
  ExpectError([&] { LoadLlama2cTokenizer((dir / "none.bin").string(), 512); }, {"none.bin", "cannot open"});
  std::ifstream f(kSource + "/models/stories260K/tok512.bin", std::ios::binary);
  std::string full((std::istreambuf_iterator<char>(f)), {});
  std::string cut = WriteFile(dir, "cut.bin", full.substr(0, 300));
  ExpectError([&] { LoadLlama2cTokenizer(cut, 512); }, {"cut.bin", "truncated"});
  std::string garbage = WriteFile(dir, "garbage.bin", std::string(64, '\xff'));
  ExpectError([&] { LoadLlama2cTokenizer(garbage, 512); }, {"garbage.bin", "max_token_length"});
  ExpectError([&] { LoadLlama2cTokenizer(kSource + "/models/stories260K/tok512.bin", 0); }, {"vocab size"});
}

TEST(TokenizerErrors, GgufMetadataUnsupportedOrInconsistent) {
  GgufTokenizerData d;
  d.model = "llama";
  ExpectError([&] { MakeGgufTokenizer(d); }, {"GGUF tokenizer", "empty"});
  d.tokens = {"a", "b", "ab"};
  ExpectError([&] { MakeGgufTokenizer(d); }, {"GGUF tokenizer", "scores"});
  d.model = "t5";
  ExpectError([&] { MakeGgufTokenizer(d); }, {"unsupported tokenizer.ggml.model 't5'"});
  d.model = "bert";  // WordPiece needs its unknown token, and [CLS] and [SEP]
  ExpectError([&] { MakeGgufTokenizer(d); }, {"WordPiece without tokenizer.ggml.unknown_token_id"});
  d.unk_id = 0;
  ExpectError([&] { MakeGgufTokenizer(d); }, {"WordPiece without [CLS] and [SEP]"});
  d.unk_id = -1;
  d.model = "gpt2";
  d.merges = {"a b"};
  d.pre = "mystery";
  ExpectError([&] { MakeGgufTokenizer(d); }, {"unsupported tokenizer.ggml.pre 'mystery'"});
  d.pre = "default";
  d.merges = {"a c"};
  ExpectError([&] { MakeGgufTokenizer(d); }, {"GGUF tokenizer", "'c'"});
  d.merges = {"a b"};
  d.token_types = {1};
  ExpectError([&] { MakeGgufTokenizer(d); }, {"token_type"});
}

}  // namespace
}  // namespace prism
