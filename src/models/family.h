// One model family in one place: how its config.json and GGUF metadata map to a ModelConfig, its GGUF
// tensor names, and its step graph. families.cpp lists the families, one line each.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/formats/gguf.h"
#include "io/formats/model_config.h"
#include "models/config_keys.h"

namespace prism {

class LmBuilder;

// llama.cpp's tensor names -> Hugging Face names.
struct GgufNames {
  std::map<std::string, std::string> global;  // whole names outside the blocks
  std::string layer_prefix;                   // "model.layers." / "transformer.h."
  std::map<std::string, std::string> layer;   // suffix after "blk.N." -> suffix after prefix + N
};

struct ModelFamily {
  std::string name;                              // ModelConfig::architecture, GGUF general.architecture
  std::vector<std::string> hf_model_types = {};  // config.json model_type values naming it besides `name`
  std::vector<std::string> hf_classes;           // config.json "architectures" entries naming it
  // Defaults where its config.json is silent, and what it always has.
  int64_t default_max_position = 2048;
  bool attention_bias = false;  // q/k/v biases (Qwen2) whatever attention_bias says
  bool qk_norm = false;         // per-head RMS norm on q and k (Qwen3)
  bool rotary = true;           // rope on q and k (head_dim must be even); false: learned positions
  // An encoder (BERT): bidirectional attention, no KV cache; its graph ends in a pooled sentence embedding
  // (prism embed) instead of logits.
  bool encoder = false;
  // A GGUF mixture of experts without <arch>.expert_weights_norm: whether the router's top-k weights are
  // renormalised (what llama.cpp does for the architecture).
  bool gguf_renormalizes_experts = true;
  // Hugging Face config.json -> config (the family's own keys, defaults and checks).
  ModelConfig (*from_hf)(const ModelFamily& f, const JsonKeys& keys) = nullptr;
  // GGUF <arch>.* metadata -> what the common keys (sizes, heads, context, vocab) leave open.
  void (*from_gguf)(const ModelFamily& f, const GgufKeys& keys, ModelConfig* c) = nullptr;
  const GgufNames* gguf_names = nullptr;
  // The step graph: tokens in, logits out, or an encoder's embedding (LmBuilder holds the inputs, weights and
  // options).
  void (*build)(LmBuilder& b) = nullptr;
};

const std::vector<ModelFamily>& ModelFamilies();
// The family named so; throws prism::Error "<source>: unsupported <what> '<name>' (supported: ...)".
const ModelFamily& FamilyNamed(const std::string& name, const std::string& source, const std::string& what);
std::string FamilyList();  // "llama, mistral, qwen2, qwen3, gemma, ..., gpt2"

// Reads a Hugging Face config.json: model_type (or architectures[0]) picks the family. Throws
// prism::Error naming the file for an unknown family, a missing/ill-typed required key, or
// unsupported rope scaling.
ModelConfig ParseHfConfig(const std::string& config_json_path);
// From general.architecture and the <arch>.* keys of a GGUF file.
ModelConfig ConfigFromGguf(const GgufFile& gguf);

// The GGUF file's tensors under Hugging Face names, sharing its mapping (no copies). When
// output.weight is absent, lm_head.weight aliases the token embedding (tied). Names with no HF
// counterpart (e.g. rope_freqs.weight) keep their GGUF name. Shapes are never transposed: every 2-D
// weight is [out_features, in_features], including GPT-2's Conv1D weights, which HF safetensors
// stores the other way round. Source() is the GGUF path. Throws for unknown architectures.
std::unique_ptr<WeightStore> HfNamedView(std::shared_ptr<const GgufFile> gguf);
// The HF name for one GGUF tensor name of `architecture` (unchanged when there is none).
std::string HfTensorName(const std::string& architecture, const std::string& gguf_name);

}  // namespace prism
