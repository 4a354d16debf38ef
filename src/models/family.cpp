// Reading a model's files through its family: config.json, GGUF metadata, GGUF tensor names.
#include "models/family.h"

#include <nlohmann/json.hpp>

#include "io/formats/mapped_file.h"
#include "ir/error.h"

namespace prism {
namespace {

using nlohmann::json;

std::string Rename(const GgufNames& m, const std::string& name) {
  if (auto it = m.global.find(name); it != m.global.end()) return it->second;
  // "blk.<digits>.<suffix>"
  if (name.rfind("blk.", 0) != 0) return name;
  size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return name;
  std::string layer = name.substr(4, dot - 4);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return name;
  const std::string suffix = name.substr(dot + 1);
  if (auto it = m.layer.find(suffix); it != m.layer.end()) return m.layer_prefix + layer + "." + it->second;
  // One expert of the older per-expert layout ("ffn_gate.<e>.weight", Mixtral files before llama.cpp
  // stacked them): the stacked name's Hugging Face counterpart with the expert's number after "experts."
  // (StackExperts then stacks them as it stacks Hugging Face's own).
  const size_t a = suffix.find('.'), b = a == std::string::npos ? a : suffix.find('.', a + 1);
  if (b == std::string::npos || b == a + 1 ||
      suffix.substr(a + 1, b - a - 1).find_first_not_of("0123456789") != std::string::npos)
    return name;
  auto it = m.layer.find(suffix.substr(0, a) + "_exps" + suffix.substr(b));
  const size_t at = it == m.layer.end() ? std::string::npos : it->second.find("experts.");
  if (at == std::string::npos) return name;
  return m.layer_prefix + layer + "." + it->second.substr(0, at + 8) + suffix.substr(a + 1, b - a) +
         it->second.substr(at + 8);
}

class HfView : public WeightStore {
 public:
  HfView(std::shared_ptr<const GgufFile> gguf, const GgufNames& names) : WeightStore(gguf->Source(), "gguf") {
    for (const TensorData& t : gguf->Tensors()) {
      TensorData renamed = t;
      renamed.name = Rename(names, t.name);
      AddTensor(std::move(renamed));
    }
    for (const auto& [name, reason] : gguf->Unsupported()) AddUnsupported(Rename(names, name), reason);
    // Tied embeddings: expose lm_head.weight as the token embedding, as llama2c does.
    const std::string embed = Rename(names, "token_embd.weight");
    const bool has_head =
        gguf->Unsupported().count("output.weight") || gguf->Find("output.weight") != nullptr;
    if (!has_head) {
      if (auto bad = Unsupported().find(embed); bad != Unsupported().end()) {
        AddUnsupported("lm_head.weight", bad->second);
      } else if (const TensorData* e = Find(embed)) {
        TensorData head = *e;
        head.name = "lm_head.weight";
        AddTensor(std::move(head));
      }
    }
    KeepAlive(std::move(gguf));
  }
};

const ModelFamily* FindFamily(const std::string& name) {
  for (const ModelFamily& f : ModelFamilies())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

std::string FamilyList() {
  std::string list;
  for (const ModelFamily& f : ModelFamilies()) list += (list.empty() ? "" : ", ") + f.name;
  return list;
}

const ModelFamily& FamilyNamed(const std::string& name, const std::string& source, const std::string& what) {
  if (const ModelFamily* f = FindFamily(name)) return *f;
  throw Error(source + ": unsupported " + what + " '" + name + "' (supported: " + FamilyList() + ")");
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
  if (family.empty()) {  // architectures[0], e.g. "LlamaForCausalLM"
    const json* a = keys.Find("architectures");
    if (a && a->is_array() && !a->empty() && (*a)[0].is_string())
      for (const ModelFamily& f : ModelFamilies())
        for (const std::string& cls : f.hf_classes)
          if (cls == (*a)[0].get<std::string>()) family = f.name;
  }
  if (family.empty())
    throw Error(path + ": no 'model_type' or known 'architectures' entry (supported: " + FamilyList() + ")");
  for (const ModelFamily& f : ModelFamilies())
    for (const std::string& type : f.hf_model_types)
      if (type == family) family = f.name;
  const ModelFamily& f = FamilyNamed(family, path, "model_type");
  ModelConfig c = f.from_hf(f, keys);
  c.architecture = f.name;
  ValidateModelConfig(c, path, f.rotary);
  return c;
}

ModelConfig ConfigFromGguf(const GgufFile& g) {
  const ModelFamily& f = FamilyNamed(g.Architecture(), g.Source(), "general.architecture");
  GgufKeys k(g);
  ModelConfig c;
  c.architecture = f.name;
  c.hidden_size = k.Int("embedding_length");
  c.intermediate_size = k.Int("feed_forward_length");
  c.num_layers = k.Int("block_count");
  c.num_heads = k.Int("attention.head_count");
  c.num_kv_heads = k.OptInt("attention.head_count_kv").value_or(c.num_heads);
  if (c.num_heads <= 0) throw Error(g.Source() + ": attention.head_count must be positive");
  c.head_dim = k.OptInt("attention.key_length").value_or(c.hidden_size / c.num_heads);
  c.max_position = k.Int("context_length");
  if (auto v = k.OptInt("vocab_size")) {
    c.vocab_size = *v;
  } else if (auto it = g.Metadata().find("tokenizer.ggml.tokens");
             it != g.Metadata().end() && it->is_array()) {
    c.vocab_size = static_cast<int64_t>(it->size());
  } else {
    for (const GgufTensorInfo& info : g.TensorInfos())
      if (info.name == "token_embd.weight" && info.shape.size() == 2) c.vocab_size = info.shape[0];
  }
  // Mixture of experts (llama.cpp writes Mixtral as "llama" with these keys, Qwen2/3-MoE as
  // "qwen2moe"/"qwen3moe").
  c.num_experts = k.OptInt("expert_count").value_or(0);
  if (c.num_experts > 0) {
    c.experts_per_token = k.Int("expert_used_count");
    c.moe_intermediate_size = k.OptInt("expert_feed_forward_length").value_or(c.intermediate_size);
    auto norm = g.Metadata().find(g.Architecture() + ".expert_weights_norm");
    c.norm_topk_prob =
        norm != g.Metadata().end() && norm->is_boolean() ? norm->get<bool>() : f.gguf_renormalizes_experts;
    // A layer with neither router nor experts has a dense MLP (Qwen3-MoE's mlp_only_layers).
    // Qwen2-MoE's shared expert: its size from the metadata where its tensors are present.
    c.moe_layers.resize(c.num_layers);
    bool shared = false;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      for (const char* t : {".ffn_gate_inp.weight", ".ffn_gate_exps.weight", ".ffn_down_exps.weight"})
        if (k.HasTensor("blk." + std::to_string(l) + t)) c.moe_layers[l] = true;
      shared = shared || k.HasTensor("blk." + std::to_string(l) + ".ffn_up_shexp.weight");
    }
    if (shared) c.shared_expert_size = k.Int("expert_shared_feed_forward_length");
  }
  f.from_gguf(f, k, &c);
  c.tie_word_embeddings = !k.HasTensor("output.weight");
  c.bos_token_id = k.OptInt("tokenizer.ggml.bos_token_id", false).value_or(-1);
  if (auto eos = k.OptInt("tokenizer.ggml.eos_token_id", false)) {
    c.eos_token_id = *eos;
    c.eos_token_ids = {*eos};
  }
  ValidateModelConfig(c, g.Source(), f.rotary);
  return c;
}

std::string HfTensorName(const std::string& architecture, const std::string& gguf_name) {
  const ModelFamily* f = FindFamily(architecture);
  return f ? Rename(*f->gguf_names, gguf_name) : gguf_name;
}

std::unique_ptr<WeightStore> HfNamedView(std::shared_ptr<const GgufFile> gguf) {
  const std::string arch = gguf->Architecture();
  const ModelFamily* f = FindFamily(arch);
  if (f == nullptr)
    throw Error(gguf->Source() + ": no Hugging Face names for architecture '" + arch +
                "' (supported: " + FamilyList() + ")");
  return std::make_unique<HfView>(std::move(gguf), *f->gguf_names);
}

}  // namespace prism
