// Pooling from a model's files: sentence-transformers' modules and Pooling config, or a GGUF's pooling_type.
#include "io/formats/sentence_embedding.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ir/error.h"

namespace prism {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ReadJsonFile(const fs::path& path) {
  std::ifstream f(path);
  if (!f) throw Error(path.string() + ": cannot open file");
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded()) throw Error(path.string() + ": not valid JSON");
  return j;
}

const char* const kModes[] = {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"};
// The legacy boolean keys, in the order sentence-transformers concatenates them.
const char* const kLegacyKeys[] = {"pooling_mode_cls_token",           "pooling_mode_max_tokens",
                                   "pooling_mode_mean_tokens",         "pooling_mode_mean_sqrt_len_tokens",
                                   "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};

std::vector<std::string> PoolingModes(const fs::path& path) {
  const json c = ReadJsonFile(path);
  std::vector<std::string> modes;
  if (c.contains("pooling_mode")) {
    const json& m = c.at("pooling_mode");
    if (m.is_string()) modes.push_back(m.get<std::string>());
    if (m.is_array())
      for (const json& x : m)
        if (x.is_string()) modes.push_back(x.get<std::string>());
  } else {
    for (size_t i = 0; i < std::size(kLegacyKeys); ++i)
      if (c.value(kLegacyKeys[i], false)) modes.push_back(kModes[i]);
  }
  if (modes.empty()) throw Error(path.string() + ": no pooling mode");
  for (const std::string& m : modes) {
    if (m == "weightedmean")
      throw Error(path.string() +
                  ": pooling mode 'weightedmean' is not supported (supported: cls, max, mean, "
                  "mean_sqrt_len_tokens, lasttoken)");
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes))
      throw Error(path.string() + ": unknown pooling mode '" + m + "'");
  }
  return modes;
}

// sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length (0: neither).
int64_t MaxTokens(const fs::path& dir) {
  for (const auto& [file, key] : {std::pair{"sentence_bert_config.json", "max_seq_length"},
                                  std::pair{"tokenizer_config.json", "model_max_length"}}) {
    if (!fs::exists(dir / file)) continue;
    const json c = ReadJsonFile(dir / file);
    // transformers writes 1e30 for "no limit".
    if (c.contains(key) && c.at(key).is_number() && c.at(key).get<double>() >= 1 &&
        c.at(key).get<double>() < 1e9)
      return (int64_t)c.at(key).get<double>();
  }
  return 0;
}

}  // namespace

EmbeddingPooling EmbeddingPoolingFromGguf(const GgufFile& gguf) {
  const nlohmann::json& m = gguf.Metadata();
  EmbeddingPooling p;
  p.normalize = true;
  auto type = m.find(gguf.Architecture() + ".pooling_type");
  if (type != m.end()) {
    const int64_t t = type->is_number_integer() ? type->get<int64_t>() : -1;
    static const char* const kGgufModes[] = {nullptr, "mean", "cls", "lasttoken"};
    if (t < 1 || t > 3)
      throw Error(gguf.Source() + ": " + gguf.Architecture() + ".pooling_type " + type->dump() +
                  " is not supported (supported: 1 mean, 2 cls, 3 last)");
    p.modes = {kGgufModes[t]};
  }
  return p;
}

EmbeddingPooling ReadEmbeddingPooling(const std::string& dir_path) {
  const fs::path dir(dir_path);
  EmbeddingPooling p;
  p.max_tokens = MaxTokens(dir);
  const fs::path modules_path = dir / "modules.json";
  if (!fs::exists(modules_path)) return p;
  const json modules = ReadJsonFile(modules_path);
  if (!modules.is_array()) throw Error(modules_path.string() + ": not a list of modules");
  bool pooled = false;
  for (const json& m : modules) {
    if (!m.is_object() || !m.contains("type") || !m.at("type").is_string())
      throw Error(modules_path.string() + ": a module without a type: " + m.dump());
    // "sentence_transformers.models.Pooling" or, since 6.0, "...modules.pooling.Pooling".
    const std::string type = m.at("type").get<std::string>();
    const std::string kind = type.substr(type.rfind('.') + 1);
    const fs::path at = dir / m.value("path", std::string());
    if (kind == "Transformer") continue;
    if (kind == "Pooling") {
      p.modes = PoolingModes(at / "config.json");
      pooled = true;
    } else if (kind == "Normalize") {
      p.normalize = true;
    } else {
      throw Error(modules_path.string() + ": module '" + type +
                  "' is not supported (supported: Transformer, Pooling, Normalize)");
    }
  }
  if (!pooled) throw Error(modules_path.string() + ": no Pooling module");
  return p;
}

}  // namespace prism
