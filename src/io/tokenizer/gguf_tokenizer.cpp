// MakeGgufTokenizer: a tokenizer from GGUF's tokenizer.ggml.* metadata ("llama" SentencePiece, "gpt2" BPE or
// "bert" WordPiece).
#include "io/tokenizer/pipeline_tokenizer.h"
#include "io/tokenizer/wordpiece_model.h"
#include "ir/error.h"

namespace prism {

namespace {

constexpr const char* kWhere = "GGUF tokenizer";
enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizer llama.cpp uses for a tokenizer.ggml.pre name (byte-level BPE only).
void SetPreTokenizer(const std::string& pre, TokenizerSpec* spec, BpeOptions* options) {
  PreTokenizer& p = spec->pre_tokenizer;
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    p.AddByteLevel(false, true);
  } else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
    p.AddSplit(TextPattern::Regex(kLlama3Pattern), SplitBehavior::kIsolated, false);
    p.AddByteLevel(false, false);
    options->ignore_merges = true;  // as Llama 3's tokenizer.json sets it
  } else if (pre == "qwen2") {
    spec->normalizer.AddUnicode(unicode::NormalForm::kNFC);  // as Qwen2's tokenizer.json does
    p.AddSplit(TextPattern::Regex(kQwen2Pattern), SplitBehavior::kIsolated, false);
    p.AddByteLevel(false, false);
  } else if (pre == "smollm") {
    p.AddDigits(true);
    p.AddByteLevel(false, true);
  } else {
    throw Error(std::string(kWhere) + ": unsupported tokenizer.ggml.pre '" + pre + "'");
  }
}

}  // namespace

std::unique_ptr<Tokenizer> MakeGgufTokenizer(const GgufTokenizerData& d) {
  const size_t n = d.tokens.size();
  const std::string where = kWhere;
  if (n == 0) throw Error(where + ": tokenizer.ggml.tokens is empty");
  if (!d.token_types.empty() && d.token_types.size() != n)
    throw Error(where + ": tokenizer.ggml.token_type has " + std::to_string(d.token_types.size()) +
                " entries for " + std::to_string(n) + " tokens");
  auto type = [&](size_t i) { return d.token_types.empty() ? (int32_t)kNormal : d.token_types[i]; };

  TokenizerSpec spec;
  spec.vocab = d.tokens;
  // Unknown, control and user-defined tokens are recognised in text (llama.cpp's special-token pass);
  // they are not BPE pieces.
  std::vector<std::string> model_vocab(n);
  for (size_t i = 0; i < n; ++i) {
    int32_t t = type(i);
    if (t == kUnknown || t == kControl || t == kUserDefined) {
      AddedToken a;
      a.content = d.tokens[i];
      a.id = (int32_t)i;
      a.special = t != kUserDefined;
      spec.added.push_back(a);
    }
    if (t == kNormal || t == kUserDefined || t == kByte) model_vocab[i] = d.tokens[i];
  }

  BpeOptions options;
  options.unk_id = d.unk_id >= 0 && (size_t)d.unk_id < n ? d.unk_id : -1;
  if (d.model == "llama") {
    if (d.scores.size() != n)
      throw Error(where + ": tokenizer.ggml.scores has " + std::to_string(d.scores.size()) + " entries for " +
                  std::to_string(n) + " tokens");
    // llama.cpp's SentencePiece path: spaces as "▁", a leading "▁" per text run, best-scored merges first.
    spec.normalizer.AddPrepend("\u2581");
    spec.normalizer.AddReplace(TextPattern::Literal(" "), "\u2581");
    options.byte_fallback = true;
    auto bpe = std::make_unique<BpeModel>(model_vocab, options);
    bpe->AddMergesFromScores(d.scores);
    spec.model = std::move(bpe);
    spec.decoder.AddReplace(TextPattern::Literal("\u2581"), " ");
    spec.decoder.AddByteFallback();
    spec.decoder.AddFuse();
    spec.decoder.AddStrip(" ", 1, 0);
  } else if (d.model == "gpt2") {
    if (d.merges.empty()) throw Error(where + ": byte-level BPE without tokenizer.ggml.merges");
    SetPreTokenizer(d.pre, &spec, &options);
    options.byte_symbols = true;
    StringIdMap ids;
    for (size_t i = 0; i < n; ++i)
      if (!model_vocab[i].empty()) ids[model_vocab[i]] = (int32_t)i;
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(d.merges.size());
    for (size_t i = 0; i < d.merges.size(); ++i) merges.push_back(SplitMergeLine(d.merges[i], where, i));
    auto bpe = std::make_unique<BpeModel>(ModelPieces(model_vocab, true), options);
    AddRankedMerges(merges, ids, where, bpe.get());
    spec.model = std::move(bpe);
    spec.decoder.AddByteLevel();
  } else if (d.model == "bert") {
    // llama.cpp's converter spells a word-initial token "▁x" and a continuation "x" (HF "##x"); control
    // tokens stay as they are. Back to WordPiece's spelling, with BERT's uncased normalizer (the file does
    // not record the tokenizer's casing; uncased is what most BERT embedders use).
    // The decoder sees the HF spelling too.
    StringIdMap ids;
    for (size_t i = 0; i < n; ++i) {
      if (model_vocab[i].empty()) continue;
      const std::string& t = model_vocab[i];
      spec.vocab[i] = t.rfind("\u2581", 0) == 0 ? t.substr(3) : "##" + t;
      ids[spec.vocab[i]] = (int32_t)i;
    }
    if (options.unk_id < 0) throw Error(where + ": WordPiece without tokenizer.ggml.unknown_token_id");
    spec.normalizer.AddBert(true, true, true, true);
    spec.pre_tokenizer.AddBert();
    spec.model = std::make_unique<WordPieceModel>(std::move(ids), WordPieceOptions{options.unk_id});
    spec.decoder.AddWordPiece("##", true);
  } else {
    throw Error(where + ": unsupported tokenizer.ggml.model '" + d.model + "'");
  }

  auto valid = [&](int32_t id) { return id >= 0 && (size_t)id < n ? id : -1; };
  spec.bos_id = valid(d.bos_id);
  spec.eos_id = valid(d.eos_id);
  if (d.model == "bert") {
    const int32_t cls = valid(d.cls_id >= 0 ? d.cls_id : d.bos_id),
                  sep = valid(d.sep_id >= 0 ? d.sep_id : d.eos_id);
    if (cls < 0 || sep < 0) throw Error(where + ": WordPiece without [CLS] and [SEP] token ids");
    spec.prefix_ids = {cls};
    spec.suffix_ids = {sep};
  } else if (d.add_bos && spec.bos_id >= 0) {
    spec.prefix_ids.push_back(spec.bos_id);
  }
  return std::make_unique<PipelineTokenizer>(std::move(spec));
}

GgufTokenizerData GgufTokenizerFromMetadata(const nlohmann::json& m, const std::string& source) {
  auto get = [&](const char* key) -> const nlohmann::json* {
    auto it = m.find(key);
    return it == m.end() ? nullptr : &*it;
  };
  GgufTokenizerData d;
  if (!get("tokenizer.ggml.model") || !get("tokenizer.ggml.tokens"))
    throw Error(source + ": GGUF file has no embedded tokenizer (tokenizer.ggml.model/tokens)");
  try {
    d.model = get("tokenizer.ggml.model")->get<std::string>();
    if (auto* p = get("tokenizer.ggml.pre")) d.pre = p->get<std::string>();
    d.tokens = get("tokenizer.ggml.tokens")->get<std::vector<std::string>>();
    if (auto* s = get("tokenizer.ggml.scores")) d.scores = s->get<std::vector<float>>();
    if (auto* t = get("tokenizer.ggml.token_type")) d.token_types = t->get<std::vector<int32_t>>();
    if (auto* mg = get("tokenizer.ggml.merges")) d.merges = mg->get<std::vector<std::string>>();
    if (auto* b = get("tokenizer.ggml.bos_token_id")) d.bos_id = b->get<int32_t>();
    if (auto* e = get("tokenizer.ggml.eos_token_id")) d.eos_id = e->get<int32_t>();
    if (auto* u = get("tokenizer.ggml.unknown_token_id")) d.unk_id = u->get<int32_t>();
    if (auto* c = get("tokenizer.ggml.cls_token_id")) d.cls_id = c->get<int32_t>();
    if (auto* s = get("tokenizer.ggml.seperator_token_id"))
      d.sep_id = s->get<int32_t>();  // llama.cpp's spelling
    if (auto* a = get("tokenizer.ggml.add_bos_token")) d.add_bos = a->get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": tokenizer.ggml.* metadata of the wrong type (" + e.what() + ")");
  }
  return d;
}

}  // namespace prism
