// Renames GGUF tensors (llama.cpp naming) to Hugging Face names, as a view sharing the mapping.
#include <map>

#include "io/gguf.h"
#include "ir/error.h"

namespace prism {
namespace {

struct NameMap {
  std::map<std::string, std::string> global;  // whole names outside the blocks
  std::string layer_prefix;                   // "model.layers." / "transformer.h."
  std::map<std::string, std::string> layer;   // suffix after "blk.N." -> suffix after prefix+N
};

const NameMap& LlamaNames() {
  static const NameMap m = {
      {{"token_embd.weight", "model.embed_tokens.weight"},
       {"output_norm.weight", "model.norm.weight"},
       {"output.weight", "lm_head.weight"}},
      "model.layers.",
      {{"attn_norm.weight", "input_layernorm.weight"},
       {"attn_q.weight", "self_attn.q_proj.weight"},
       {"attn_k.weight", "self_attn.k_proj.weight"},
       {"attn_v.weight", "self_attn.v_proj.weight"},
       {"attn_output.weight", "self_attn.o_proj.weight"},
       {"attn_q.bias", "self_attn.q_proj.bias"},
       {"attn_k.bias", "self_attn.k_proj.bias"},
       {"attn_v.bias", "self_attn.v_proj.bias"},
       {"attn_output.bias", "self_attn.o_proj.bias"},
       {"attn_q_norm.weight", "self_attn.q_norm.weight"},
       {"attn_k_norm.weight", "self_attn.k_norm.weight"},
       {"ffn_norm.weight", "post_attention_layernorm.weight"},
       {"ffn_gate.weight", "mlp.gate_proj.weight"},
       {"ffn_up.weight", "mlp.up_proj.weight"},
       {"ffn_down.weight", "mlp.down_proj.weight"}}};
  return m;
}

const NameMap& Gpt2Names() {
  static const NameMap m = {
      {{"token_embd.weight", "transformer.wte.weight"},
       {"position_embd.weight", "transformer.wpe.weight"},
       {"output_norm.weight", "transformer.ln_f.weight"},
       {"output_norm.bias", "transformer.ln_f.bias"},
       {"output.weight", "lm_head.weight"}},
      "transformer.h.",
      {{"attn_norm.weight", "ln_1.weight"},
       {"attn_norm.bias", "ln_1.bias"},
       {"attn_qkv.weight", "attn.c_attn.weight"},
       {"attn_qkv.bias", "attn.c_attn.bias"},
       {"attn_output.weight", "attn.c_proj.weight"},
       {"attn_output.bias", "attn.c_proj.bias"},
       {"ffn_norm.weight", "ln_2.weight"},
       {"ffn_norm.bias", "ln_2.bias"},
       {"ffn_up.weight", "mlp.c_fc.weight"},
       {"ffn_up.bias", "mlp.c_fc.bias"},
       {"ffn_down.weight", "mlp.c_proj.weight"},
       {"ffn_down.bias", "mlp.c_proj.bias"}}};
  return m;
}

const NameMap* NamesFor(const std::string& arch) {
  if (arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3")
    return &LlamaNames();
  if (arch == "gpt2") return &Gpt2Names();
  return nullptr;
}

std::string Rename(const NameMap& m, const std::string& name) {
  if (auto it = m.global.find(name); it != m.global.end()) return it->second;
  // "blk.<digits>.<suffix>"
  if (name.rfind("blk.", 0) != 0) return name;
  size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return name;
  std::string layer = name.substr(4, dot - 4);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return name;
  auto it = m.layer.find(name.substr(dot + 1));
  if (it == m.layer.end()) return name;
  return m.layer_prefix + layer + "." + it->second;
}

class HfView : public WeightStore {
 public:
  HfView(std::shared_ptr<const GgufFile> gguf, const NameMap& names)
      : WeightStore(gguf->Source(), "gguf") {
    for (const TensorData& t : gguf->Tensors()) {
      TensorData renamed = t;
      renamed.name = Rename(names, t.name);
      AddTensor(std::move(renamed));
    }
    for (const auto& [name, reason] : gguf->Unsupported()) AddUnsupported(Rename(names, name), reason);
    // Tied embeddings: expose lm_head.weight as the token embedding, as llama2c does.
    const std::string embed = Rename(names, "token_embd.weight");
    const bool has_head = gguf->Unsupported().count("output.weight") ||
                          gguf->Find("output.weight") != nullptr;
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

}  // namespace

std::string HfTensorName(const std::string& architecture, const std::string& gguf_name) {
  const NameMap* m = NamesFor(architecture);
  return m ? Rename(*m, gguf_name) : gguf_name;
}

std::unique_ptr<WeightStore> HfNamedView(std::shared_ptr<const GgufFile> gguf) {
  const std::string arch = gguf->Architecture();
  const NameMap* names = NamesFor(arch);
  if (names == nullptr)
    throw Error(gguf->Source() + ": no Hugging Face names for architecture '" + arch +
                "' (supported: llama, mistral, qwen2, qwen3, gpt2)");
  return std::make_unique<HfView>(std::move(gguf), *names);
}

}  // namespace prism
