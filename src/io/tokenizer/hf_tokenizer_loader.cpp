// LoadHfTokenizer: tokenizer.json (or vocab.json + merges.txt, or vocab.txt) + tokenizer_config.json.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/tokenizer/pipeline_tokenizer.h"
#include "io/tokenizer/wordpiece_model.h"
#include "ir/error.h"

namespace prism {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path.string() + ": cannot open file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json ReadJson(const fs::path& path) {
  try {
    return json::parse(ReadFile(path));
  } catch (const json::exception& e) {
    throw Error(path.string() + ": invalid JSON (" + e.what() + ")");
  }
}

// Builds the parts of a tokenizer from parsed JSON; every failure names the file.
class HfParser {
 public:
  explicit HfParser(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void Fail(const std::string& what) const { throw Error(file_ + ": " + what); }

  TextPattern Pattern(const json& j) const {
    if (j.contains("String")) return TextPattern::Literal(j.at("String").get<std::string>());
    if (j.contains("Regex")) {
      try {
        return TextPattern::Regex(j.at("Regex").get<std::string>());
      } catch (const Error& e) {
        Fail(e.what());
      }
    }
    Fail("pattern is neither String nor Regex: " + j.dump());
  }

  void Normalizers(const json& j, Normalizer* n) const {
    if (j.is_null()) return;
    std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const json& sub : j.at("normalizers")) Normalizers(sub, n);
    } else if (type == "NFC") {
      n->AddUnicode(unicode::NormalForm::kNFC);
    } else if (type == "NFD") {
      n->AddUnicode(unicode::NormalForm::kNFD);
    } else if (type == "NFKC") {
      n->AddUnicode(unicode::NormalForm::kNFKC);
    } else if (type == "NFKD") {
      n->AddUnicode(unicode::NormalForm::kNFKD);
    } else if (type == "Prepend") {
      n->AddPrepend(j.at("prepend").get<std::string>());
    } else if (type == "Replace") {
      n->AddReplace(Pattern(j.at("pattern")), j.at("content").get<std::string>());
    } else if (type == "Lowercase") {
      n->AddLowercase();
    } else if (type == "StripAccents") {
      n->AddStripAccents();
    } else if (type == "BertNormalizer") {
      const bool lowercase = j.value("lowercase", true);
      const json strip = j.value("strip_accents", json());  // null: as lowercase
      n->AddBert(j.value("clean_text", true), j.value("handle_chinese_chars", true),
                 strip.is_boolean() ? strip.get<bool>() : lowercase, lowercase);
    } else {
      Fail("unsupported normalizer type '" + type + "'");
    }
  }

  static PrependScheme Scheme(const json& j) {
    if (j.contains("prepend_scheme")) {
      std::string s = j.at("prepend_scheme").get<std::string>();
      return s == "first"   ? PrependScheme::kFirst
             : s == "never" ? PrependScheme::kNever
                            : PrependScheme::kAlways;
    }
    return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;  // older files
  }

  void PreTokenizers(const json& j, PreTokenizer* p) const {
    if (j.is_null()) return;
    std::string type = j.at("type").get<std::string>();
    if (p->byte_level()) Fail("pre_tokenizer '" + type + "' after ByteLevel is not supported");
    if (type == "Sequence") {
      for (const json& sub : j.at("pretokenizers")) PreTokenizers(sub, p);
    } else if (type == "Split") {
      static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
          {"Removed", SplitBehavior::kRemoved},
          {"Isolated", SplitBehavior::kIsolated},
          {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
          {"MergedWithNext", SplitBehavior::kMergedWithNext},
          {"Contiguous", SplitBehavior::kContiguous}};
      std::string name = j.at("behavior").get<std::string>();
      const SplitBehavior* behavior = nullptr;
      for (const auto& [n, b] : kBehaviors)
        if (name == n) behavior = &b;
      if (!behavior) Fail("unknown Split behavior '" + name + "'");
      p->AddSplit(Pattern(j.at("pattern")), *behavior, j.value("invert", false));
    } else if (type == "ByteLevel") {
      p->AddByteLevel(j.value("add_prefix_space", true), j.value("use_regex", true));
    } else if (type == "Metaspace") {
      std::string replacement = j.value("replacement", std::string("\u2581"));
      if (replacement.empty()) Fail("Metaspace replacement is empty");
      p->AddMetaspace(replacement, Scheme(j), j.value("split", true));
    } else if (type == "Digits") {
      p->AddDigits(j.value("individual_digits", false));
    } else if (type == "BertPreTokenizer") {
      p->AddBert();
    } else if (type == "WhitespaceSplit") {
      p->AddBert(false);
    } else if (type == "Whitespace") {
      p->AddSplit(TextPattern::Regex(R"(\w+|[^\w\s]+)"), SplitBehavior::kRemoved, true);
    } else {
      Fail("unsupported pre_tokenizer type '" + type + "'");
    }
  }

  void Decoders(const json& j, TokenDecoder* d) const {
    if (j.is_null()) return;
    std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const json& sub : j.at("decoders")) Decoders(sub, d);
    } else if (type == "ByteLevel") {
      d->AddByteLevel();
    } else if (type == "Replace") {
      d->AddReplace(Pattern(j.at("pattern")), j.at("content").get<std::string>());
    } else if (type == "ByteFallback") {
      d->AddByteFallback();
    } else if (type == "Fuse") {
      d->AddFuse();
    } else if (type == "Strip") {
      std::string content = j.at("content").get<std::string>();
      if (content.empty()) Fail("Strip decoder content is empty");
      d->AddStrip(content, j.value("start", 0), j.value("stop", 0));
    } else if (type == "Metaspace") {
      std::string replacement = j.value("replacement", std::string("\u2581"));
      if (replacement.empty()) Fail("Metaspace replacement is empty");
      d->AddMetaspace(replacement, Scheme(j) != PrependScheme::kNever);
    } else if (type == "WordPiece") {
      d->AddWordPiece(j.value("prefix", std::string("##")), j.value("cleanup", true));
    } else {
      Fail("unsupported decoder type '" + type + "'");
    }
  }

  // Ids a post-processor puts before and after a single sequence.
  void PostProcessor(const json& j, std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) const {
    if (j.is_null()) return;
    std::string type = j.at("type").get<std::string>();
    if (type == "Sequence") {
      for (const json& sub : j.at("processors")) {
        std::vector<int32_t> p, s;
        PostProcessor(sub, &p, &s);
        prefix->insert(prefix->begin(), p.begin(), p.end());  // a later processor wraps the earlier result
        suffix->insert(suffix->end(), s.begin(), s.end());
      }
    } else if (type == "ByteLevel") {
      // Only adjusts offsets.
    } else if (type == "TemplateProcessing") {
      const json& specials = j.at("special_tokens");
      bool seen_sequence = false;
      for (const json& item : j.at("single")) {
        if (item.contains("Sequence")) {
          seen_sequence = true;
        } else if (item.contains("SpecialToken")) {
          std::string name = item.at("SpecialToken").at("id").get<std::string>();
          if (!specials.contains(name)) Fail("template uses special token '" + name + "' without ids");
          for (const json& id : specials.at(name).at("ids"))
            (seen_sequence ? suffix : prefix)->push_back(id.get<int32_t>());
        } else {
          Fail("unknown template item " + item.dump());
        }
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      prefix->push_back(j.at("cls").at(1).get<int32_t>());
      suffix->push_back(j.at("sep").at(1).get<int32_t>());
    } else {
      Fail("unsupported post_processor type '" + type + "'");
    }
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// An added token from tokenizer.json's added_tokens or tokenizer_config.json's added_tokens_decoder.
AddedToken ParseAddedToken(const json& j, int32_t id) {
  AddedToken t;
  t.id = id;
  t.content = j.at("content").get<std::string>();
  t.special = j.value("special", false);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  t.single_word = j.value("single_word", false);
  t.normalized = j.value("normalized", !t.special);
  return t;
}

// Puts added tokens into the vocab, growing it when their ids lie beyond the model's.
void PlaceAddedTokens(const std::vector<AddedToken>& added, std::vector<std::string>* vocab) {
  for (const AddedToken& t : added) {
    if ((size_t)t.id >= vocab->size()) vocab->resize(t.id + 1);
    (*vocab)[t.id] = t.content;
  }
}

// A token named in tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::string();  // null: explicitly none
}

// The model vocab (text -> id) as a by-id list plus the lookup map.
void ReadVocab(const json& vocab_json, const HfParser& p, std::vector<std::string>* vocab, StringIdMap* ids) {
  if (!vocab_json.is_object()) p.Fail("vocab is not an object");
  for (const auto& [text, id_json] : vocab_json.items()) {
    int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > (1 << 24)) p.Fail("token '" + text + "' has a bad id " + std::to_string(id));
    if ((size_t)id >= vocab->size()) vocab->resize(id + 1);
    (*vocab)[id] = text;
    (*ids)[text] = (int32_t)id;
  }
}

struct Built {
  TokenizerSpec spec;
  std::vector<std::pair<std::string, std::string>> merges;
  StringIdMap model_ids;
  BpeOptions options;
};

// Makes the BPE model from the merges unless a WordPiece model is already there.
std::unique_ptr<Tokenizer> Finish(Built& b, const std::string& where) {
  if (!b.spec.model) {
    b.options.byte_symbols = b.spec.pre_tokenizer.byte_level();
    // Only the model's own vocab takes part in BPE; tokens that exist only as added tokens do not.
    std::vector<std::string> pieces = ModelPieces(b.spec.vocab, b.options.byte_symbols);
    auto bpe = std::make_unique<BpeModel>(pieces, b.options);
    AddRankedMerges(b.merges, b.model_ids, where, bpe.get());
    b.spec.model = std::move(bpe);
  }
  PlaceAddedTokens(b.spec.added, &b.spec.vocab);
  return std::make_unique<PipelineTokenizer>(std::move(b.spec));
}

// The WordPiece model over the vocab read into b.model_ids.
void MakeWordPiece(Built& b, const std::string& unk, const std::string& prefix, size_t max_chars,
                   const HfParser& p) {
  auto it = b.model_ids.find(unk);
  if (it == b.model_ids.end()) p.Fail("WordPiece unk_token '" + unk + "' is not in the vocab");
  b.spec.model =
      std::make_unique<WordPieceModel>(b.model_ids, WordPieceOptions{it->second, prefix, max_chars});
}

// Sets bos/eos from tokenizer_config.json when it names them, else from the post-processor / usual names.
void ResolveBosEos(const json& config, Built& b) {
  auto find = [&](const std::string& text) -> int32_t {
    for (const AddedToken& t : b.spec.added)
      if (t.content == text) return t.id;
    auto it = b.model_ids.find(text);
    return it == b.model_ids.end() ? -1 : it->second;
  };
  if (auto bos = ConfigToken(config, "bos_token")) {
    b.spec.bos_id = bos->empty() ? -1 : find(*bos);
  } else if (!b.spec.prefix_ids.empty()) {
    b.spec.bos_id = b.spec.prefix_ids.front();
  }
  if (auto eos = ConfigToken(config, "eos_token")) {
    b.spec.eos_id = eos->empty() ? -1 : find(*eos);
  } else {
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>"}) {
      int32_t id = find(name);
      if (id >= 0) {
        b.spec.eos_id = id;
        break;
      }
    }
  }
}

// A BPE model's vocab, merges and options.
void ReadBpeModel(const json& model, const HfParser& p, Built& b) {
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() > 0)
    p.Fail("BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model.at(key).is_string() && !model.at(key).get<std::string>().empty())
      p.Fail(std::string("BPE ") + key + " is not supported");

  ReadVocab(model.at("vocab"), p, &b.spec.vocab, &b.model_ids);
  const json& merges = model.at("merges");
  b.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      b.merges.push_back(SplitMergeLine(m.get<std::string>(), p.file(), i));
    } else if (m.is_array() && m.size() == 2) {
      b.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      p.Fail("merge " + std::to_string(i) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  b.options.byte_fallback = model.value("byte_fallback", false);
  b.options.fuse_unk = model.value("fuse_unk", false);
  b.options.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    auto it = b.model_ids.find(model.at("unk_token").get<std::string>());
    if (it == b.model_ids.end()) p.Fail("unk_token is not in the vocab");
    b.options.unk_id = it->second;
  }
}

std::unique_ptr<Tokenizer> LoadTokenizerJson(const fs::path& path, const json& config) {
  HfParser p(path.string());
  json j = ReadJson(path);
  try {
    Built b;
    const json& model = j.at("model");
    std::string type = model.contains("type") ? model.at("type").get<std::string>() : "";
    if (type.empty() && model.contains("merges")) type = "BPE";  // old files (GPT-2) leave the type out
    if (type == "WordPiece") {
      ReadVocab(model.at("vocab"), p, &b.spec.vocab, &b.model_ids);
      MakeWordPiece(b, model.value("unk_token", std::string("[UNK]")),
                    model.value("continuing_subword_prefix", std::string("##")),
                    model.value("max_input_chars_per_word", (size_t)100), p);
    } else if (type == "BPE") {
      ReadBpeModel(model, p, b);
    } else {
      p.Fail("unsupported model type '" + (type.empty() ? std::string("(none)") : type) + "'");
    }

    if (j.contains("added_tokens"))
      for (const json& t : j.at("added_tokens"))
        b.spec.added.push_back(ParseAddedToken(t, t.at("id").get<int32_t>()));
    p.Normalizers(j.value("normalizer", json()), &b.spec.normalizer);
    p.PreTokenizers(j.value("pre_tokenizer", json()), &b.spec.pre_tokenizer);
    p.PostProcessor(j.value("post_processor", json()), &b.spec.prefix_ids, &b.spec.suffix_ids);
    p.Decoders(j.value("decoder", json()), &b.spec.decoder);
    ResolveBosEos(config, b);
    return Finish(b, p.file());
  } catch (const json::exception& e) {
    p.Fail(std::string("malformed tokenizer (") + e.what() + ")");
  }
}

// vocab.json + merges.txt, configured as transformers' GPT2Tokenizer / Qwen2Tokenizer would build it.
std::unique_ptr<Tokenizer> LoadVocabMerges(const fs::path& dir, const json& config) {
  HfParser p((dir / "vocab.json").string());
  std::string cls = config.value("tokenizer_class", std::string("GPT2Tokenizer"));
  Built b;
  try {
    ReadVocab(ReadJson(dir / "vocab.json"), p, &b.spec.vocab, &b.model_ids);
    if (config.contains("added_tokens_decoder")) {
      for (const auto& [id, t] : config.at("added_tokens_decoder").items())
        b.spec.added.push_back(ParseAddedToken(t, std::stoi(id)));
    }
    if (cls == "Qwen2Tokenizer" || cls == "Qwen2TokenizerFast") {
      b.spec.normalizer.AddUnicode(unicode::NormalForm::kNFC);
      b.spec.pre_tokenizer.AddSplit(TextPattern::Regex(kQwen2Pattern), SplitBehavior::kIsolated, false);
      b.spec.pre_tokenizer.AddByteLevel(false, false);
    } else if (cls == "GPT2Tokenizer" || cls == "GPT2TokenizerFast") {
      b.spec.pre_tokenizer.AddByteLevel(config.value("add_prefix_space", false), true);
    } else {
      throw Error((dir / "tokenizer_config.json").string() + ": tokenizer_class '" + cls +
                  "' cannot be built from vocab.json + merges.txt");
    }
    b.spec.decoder.AddByteLevel();
    ResolveBosEos(config, b);
    if (config.value("add_bos_token", false) && b.spec.bos_id >= 0)
      b.spec.prefix_ids.push_back(b.spec.bos_id);
  } catch (const json::exception& e) {
    p.Fail(std::string("malformed tokenizer files (") + e.what() + ")");
  }

  fs::path merges_path = dir / "merges.txt";
  std::istringstream lines(ReadFile(merges_path));
  std::string line;
  for (size_t n = 0; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 0 && line.rfind("#version", 0) == 0)) continue;  // the header is optional
    b.merges.push_back(SplitMergeLine(line, merges_path.string(), n + 1));
  }
  return Finish(b, merges_path.string());
}

// vocab.txt (one token per line, the line number its id), configured as transformers' BertTokenizerFast
// builds it from tokenizer_config.json.
std::unique_ptr<Tokenizer> LoadBertVocab(const fs::path& dir, const json& config) {
  HfParser p((dir / "vocab.txt").string());
  Built b;
  std::istringstream lines(ReadFile(dir / "vocab.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    b.model_ids.emplace(line, (int32_t)b.spec.vocab.size());
    b.spec.vocab.push_back(line);
  }
  try {
    auto token = [&](const char* key, const char* fallback) {
      auto t = ConfigToken(config, key);
      return t && !t->empty() ? *t : std::string(fallback);
    };
    const bool lowercase = config.value("do_lower_case", true);
    const json strip = config.value("strip_accents", json());
    b.spec.normalizer.AddBert(true, config.value("tokenize_chinese_chars", true),
                              strip.is_boolean() ? strip.get<bool>() : lowercase, lowercase);
    b.spec.pre_tokenizer.AddBert();
    MakeWordPiece(b, token("unk_token", "[UNK]"), "##", 100, p);
    static const std::pair<const char*, const char*> kSpecial[] = {{"cls_token", "[CLS]"},
                                                                   {"sep_token", "[SEP]"},
                                                                   {"pad_token", "[PAD]"},
                                                                   {"mask_token", "[MASK]"},
                                                                   {"unk_token", "[UNK]"}};
    for (const auto& [key, fallback] : kSpecial)
      if (auto it = b.model_ids.find(token(key, fallback)); it != b.model_ids.end())
        b.spec.added.push_back({.content = it->first, .id = it->second, .special = true});
    auto cls = b.model_ids.find(token("cls_token", "[CLS]")),
         sep = b.model_ids.find(token("sep_token", "[SEP]"));
    if (cls == b.model_ids.end() || sep == b.model_ids.end()) p.Fail("vocab has no [CLS] or [SEP] token");
    b.spec.prefix_ids = {cls->second};
    b.spec.suffix_ids = {sep->second};
    b.spec.decoder.AddWordPiece("##", true);
    ResolveBosEos(config, b);
  } catch (const json::exception& e) {
    p.Fail(std::string("malformed tokenizer_config.json (") + e.what() + ")");
  }
  return Finish(b, p.file());
}

}  // namespace

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path) {
  fs::path p(path);
  if (!fs::exists(p)) throw Error(path + ": tokenizer file or folder not found");
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  json config = json::object();
  if (fs::exists(dir / "tokenizer_config.json")) {
    config = ReadJson(dir / "tokenizer_config.json");
    if (!config.is_object()) throw Error((dir / "tokenizer_config.json").string() + ": not a JSON object");
  }
  if (!fs::is_directory(p)) return LoadTokenizerJson(p, config);
  if (fs::exists(dir / "tokenizer.json")) return LoadTokenizerJson(dir / "tokenizer.json", config);
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) return LoadVocabMerges(dir, config);
  if (fs::exists(dir / "vocab.txt")) return LoadBertVocab(dir, config);
  throw Error(path + ": folder has neither tokenizer.json, vocab.json + merges.txt, nor vocab.txt");
}

}  // namespace prism
