// ModelConfig from Hugging Face config.json or GGUF metadata, plus its validation.
#include "io/model_config.h"

#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/mapped_file.h"
#include "ir/error.h"

namespace prism {
namespace {

using nlohmann::json;

const char* const kSupportedFamilies = "llama, mistral, qwen2, qwen3, gpt2";

// Typed access to one JSON object, with messages naming the file and key. JSON null counts
// as absent (HF configs write "head_dim": null and the like).
class JsonKeys {
 public:
  JsonKeys(const json& j, const std::string& source) : j_(j), source_(source) {}

  const json* Find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool Has(const std::string& key) const { return Find(key) != nullptr; }

  std::optional<int64_t> OptInt(const std::string& key) const {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      throw Error(source_ + ": '" + key + "' must be an integer, got " + v->dump());
    return v->get<int64_t>();
  }
  int64_t Int(const std::string& key) const {
    if (auto v = OptInt(key)) return *v;
    throw Error(source_ + ": missing required key '" + key + "'");
  }
  int64_t Int(const std::string& key, int64_t fallback) const {
    return OptInt(key).value_or(fallback);
  }
  double Double(const std::string& key, double fallback) const {
    const json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_number()) throw Error(source_ + ": '" + key + "' must be a number, got " + v->dump());
    return v->get<double>();
  }
  bool Bool(const std::string& key, bool fallback) const {
    const json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw Error(source_ + ": '" + key + "' must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string String(const std::string& key, const std::string& fallback) const {
    const json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_string()) throw Error(source_ + ": '" + key + "' must be a string, got " + v->dump());
    return v->get<std::string>();
  }

 private:
  const json& j_;
  const std::string& source_;
};

std::string FamilyFromArchitectures(const json& config) {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
  const std::string a = (*it)[0].get<std::string>();
  if (a == "LlamaForCausalLM") return "llama";
  if (a == "MistralForCausalLM") return "mistral";
  if (a == "Qwen2ForCausalLM") return "qwen2";
  if (a == "Qwen3ForCausalLM") return "qwen3";
  if (a == "GPT2LMHeadModel" || a == "GPT2Model") return "gpt2";
  return "";
}

std::string CheckedActivation(const std::string& act, const std::string& source) {
  if (act == "silu" || act == "swish") return "silu";
  if (act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh") return act;
  throw Error(source + ": unsupported activation '" + act +
              "' (supported: silu, gelu, gelu_new, gelu_pytorch_tanh)");
}

void ReadTokenIds(const JsonKeys& keys, const json& config, const std::string& source,
                  ModelConfig* c) {
  c->bos_token_id = keys.Int("bos_token_id", -1);
  auto eos = config.find("eos_token_id");
  if (eos == config.end() || eos->is_null()) return;
  if (eos->is_array()) {
    for (const json& id : *eos) {
      if (!id.is_number_integer())
        throw Error(source + ": 'eos_token_id' entries must be integers, got " + id.dump());
      c->eos_token_ids.push_back(id.get<int64_t>());
    }
  } else {
    c->eos_token_ids.push_back(keys.Int("eos_token_id"));
  }
  if (!c->eos_token_ids.empty()) c->eos_token_id = c->eos_token_ids[0];
}

// transformers >= 5 writes rope_theta and the scaling keys together in a "rope_parameters"
// object; earlier configs (most checkpoints on the Hub) have top-level rope_theta and
// rope_scaling. Returns rope_parameters, or nullptr when absent or null.
const json* RopeParameters(const json& config, const std::string& source) {
  auto it = config.find("rope_parameters");
  if (it == config.end() || it->is_null()) return nullptr;
  if (!it->is_object()) throw Error(source + ": 'rope_parameters' must be an object or null");
  return &*it;
}

void ReadRopeScaling(const json& config, const std::string& source, ModelConfig* c) {
  const json* scaling = nullptr;
  auto it = config.find("rope_scaling");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_object()) throw Error(source + ": 'rope_scaling' must be an object or null");
    scaling = &*it;
  } else {
    scaling = RopeParameters(config, source);
  }
  if (scaling == nullptr) return;
  JsonKeys rs(*scaling, source);
  const std::string type = rs.String("rope_type", rs.String("type", "default"));
  if (type == "default") return;
  if (type != "llama3")
    throw Error(source + ": rope_scaling type '" + type + "' is not supported (supported: llama3)");
  c->rope_factor = rs.Double("factor", 0);
  c->rope_low_freq_factor = rs.Double("low_freq_factor", 1);
  c->rope_high_freq_factor = rs.Double("high_freq_factor", 4);
  c->rope_original_max_position = rs.Int("original_max_position_embeddings", 8192);
  if (c->rope_factor <= 0) throw Error(source + ": rope_scaling factor must be positive");
}

ModelConfig ParseLlamaFamily(const json& config, const std::string& family,
                             const std::string& source) {
  JsonKeys k(config, source);
  ModelConfig c;
  c.architecture = family;
  c.vocab_size = k.Int("vocab_size");
  c.hidden_size = k.Int("hidden_size");
  c.intermediate_size = k.Int("intermediate_size");
  c.num_layers = k.Int("num_hidden_layers");
  c.num_heads = k.Int("num_attention_heads");
  c.num_kv_heads = k.Int("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) throw Error(source + ": 'num_attention_heads' must be positive");
  c.head_dim = k.Int("head_dim", c.hidden_size / c.num_heads);
  const int64_t default_positions = family == "qwen2" || family == "qwen3" ? 32768
                                    : family == "mistral"                 ? 4096 * 32
                                                                          : 2048;
  c.max_position = k.Int("max_position_embeddings", default_positions);
  c.norm_eps = k.Double("rms_norm_eps", 1e-6);
  const json* rope_params = RopeParameters(config, source);
  c.rope_theta = k.Double("rope_theta",
                          rope_params ? JsonKeys(*rope_params, source).Double("rope_theta", 10000) : 10000);
  c.rope_interleaved = false;  // HF checkpoints use the half-split rope layout
  c.tie_word_embeddings = k.Bool("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases; the others say so through attention_bias.
  c.attention_bias = family == "qwen2" || k.Bool("attention_bias", false);
  c.qk_norm = family == "qwen3";
  c.hidden_act = CheckedActivation(k.String("hidden_act", "silu"), source);
  ReadRopeScaling(config, source, &c);
  ReadTokenIds(k, config, source, &c);
  return c;
}

ModelConfig ParseGpt2(const json& config, const std::string& source) {
  JsonKeys k(config, source);
  ModelConfig c;
  c.architecture = "gpt2";
  c.vocab_size = k.Int("vocab_size", 50257);
  c.hidden_size = k.Int("n_embd", 768);
  c.num_layers = k.Int("n_layer", 12);
  c.num_heads = k.Int("n_head", 12);
  c.num_kv_heads = c.num_heads;
  if (c.num_heads <= 0) throw Error(source + ": 'n_head' must be positive");
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = k.Int("n_inner", 4 * c.hidden_size);
  c.max_position = k.Int("n_positions", 1024);
  c.norm_eps = k.Double("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = k.Bool("tie_word_embeddings", true);
  c.attention_bias = true;
  c.hidden_act = CheckedActivation(k.String("activation_function", "gelu_new"), source);
  ReadTokenIds(k, config, source, &c);
  if (c.bos_token_id < 0) c.bos_token_id = 50256;
  if (c.eos_token_ids.empty()) {
    c.eos_token_ids = {50256};
    c.eos_token_id = 50256;
  }
  return c;
}

// Integer metadata (any of GGUF's integer types); nullopt when absent.
std::optional<int64_t> GgufInt(const GgufFile& g, const std::string& key) {
  auto it = g.Metadata().find(key);
  if (it == g.Metadata().end()) return std::nullopt;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw Error(g.Source() + ": metadata '" + key + "' must be an integer");
  return it->get<int64_t>();
}

int64_t GgufRequiredInt(const GgufFile& g, const std::string& key) {
  if (auto v = GgufInt(g, key)) return *v;
  throw Error(g.Source() + ": missing metadata '" + key + "'");
}

double GgufDouble(const GgufFile& g, const std::string& key, double fallback) {
  auto it = g.Metadata().find(key);
  if (it == g.Metadata().end()) return fallback;
  if (!it->is_number()) throw Error(g.Source() + ": metadata '" + key + "' must be a number");
  return it->get<double>();
}

bool HasTensor(const GgufFile& g, const std::string& name) {
  for (const GgufTensorInfo& info : g.TensorInfos())
    if (info.name == name) return true;
  return false;
}

}  // namespace

void ValidateModelConfig(const ModelConfig& c, const std::string& source) {
  auto positive = [&](int64_t v, const char* what) {
    if (v <= 0) throw Error(source + ": " + what + " must be positive, got " + std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_layers, "num_layers");
  positive(c.num_heads, "num_heads");
  positive(c.num_kv_heads, "num_kv_heads");
  positive(c.head_dim, "head_dim");
  positive(c.max_position, "max_position");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error(source + ": num_heads " + std::to_string(c.num_heads) +
                " is not a multiple of num_kv_heads " + std::to_string(c.num_kv_heads));
  if (c.architecture != "gpt2" && c.head_dim % 2 != 0)
    throw Error(source + ": head_dim " + std::to_string(c.head_dim) + " must be even for rope");
}

ModelConfig ParseHfConfig(const std::string& path) {
  MappedFile file(path);
  const char* text = reinterpret_cast<const char*>(file.data());
  json config;
  try {
    config = json::parse(text, text + file.size());
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!config.is_object()) throw Error(path + ": not a JSON object");
  JsonKeys keys(config, path);
  std::string family = keys.String("model_type", "");
  if (family.empty()) family = FamilyFromArchitectures(config);
  if (family.empty())
    throw Error(path + ": no 'model_type' or known 'architectures' entry (supported: " +
                kSupportedFamilies + ")");
  ModelConfig c;
  if (family == "llama" || family == "mistral" || family == "qwen2" || family == "qwen3") {
    c = ParseLlamaFamily(config, family, path);
  } else if (family == "gpt2") {
    c = ParseGpt2(config, path);
  } else {
    throw Error(path + ": unsupported model_type '" + family + "' (supported: " +
                kSupportedFamilies + ")");
  }
  ValidateModelConfig(c, path);
  return c;
}

ModelConfig ConfigFromGguf(const GgufFile& g) {
  const std::string arch = g.Architecture();
  const bool llama_like = arch == "llama" || arch == "mistral";
  if (!llama_like && arch != "qwen2" && arch != "qwen3" && arch != "gpt2")
    throw Error(g.Source() + ": unsupported general.architecture '" + arch + "' (supported: " +
                kSupportedFamilies + ")");
  const std::string p = arch + ".";
  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = GgufRequiredInt(g, p + "embedding_length");
  c.intermediate_size = GgufRequiredInt(g, p + "feed_forward_length");
  c.num_layers = GgufRequiredInt(g, p + "block_count");
  c.num_heads = GgufRequiredInt(g, p + "attention.head_count");
  c.num_kv_heads = GgufInt(g, p + "attention.head_count_kv").value_or(c.num_heads);
  if (c.num_heads <= 0) throw Error(g.Source() + ": attention.head_count must be positive");
  c.head_dim = GgufInt(g, p + "attention.key_length").value_or(c.hidden_size / c.num_heads);
  c.max_position = GgufRequiredInt(g, p + "context_length");
  if (auto v = GgufInt(g, p + "vocab_size")) {
    c.vocab_size = *v;
  } else if (auto it = g.Metadata().find("tokenizer.ggml.tokens");
             it != g.Metadata().end() && it->is_array()) {
    c.vocab_size = static_cast<int64_t>(it->size());
  } else {
    for (const GgufTensorInfo& info : g.TensorInfos())
      if (info.name == "token_embd.weight" && info.shape.size() == 2) c.vocab_size = info.shape[0];
  }
  if (arch == "gpt2") {
    c.norm_eps = GgufDouble(g, p + "attention.layer_norm_epsilon", 1e-5);
    c.hidden_act = "gelu_new";
    c.attention_bias = true;
  } else {
    c.norm_eps = GgufDouble(g, p + "attention.layer_norm_rms_epsilon", 1e-6);
    c.rope_theta = GgufDouble(g, p + "rope.freq_base", 10000);
    c.rope_interleaved = llama_like;  // llama.cpp's converter permutes llama Q/K rows
    c.attention_bias = arch == "qwen2" || HasTensor(g, "blk.0.attn_q.bias");
    c.qk_norm = HasTensor(g, "blk.0.attn_q_norm.weight");
    auto scaling = g.Metadata().find(p + "rope.scaling.type");
    if (scaling != g.Metadata().end() && *scaling != "none")
      throw Error(g.Source() + ": rope scaling type " + scaling->dump() + " is not supported");
  }
  c.tie_word_embeddings = !HasTensor(g, "output.weight");
  c.bos_token_id = GgufInt(g, "tokenizer.ggml.bos_token_id").value_or(-1);
  if (auto eos = GgufInt(g, "tokenizer.ggml.eos_token_id")) {
    c.eos_token_id = *eos;
    c.eos_token_ids = {*eos};
  }
  ValidateModelConfig(c, g.Source());
  return c;
}

}  // namespace prism
