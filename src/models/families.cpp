// Every model family Prism reads, one entry each: its names, defaults, readers, GGUF names and graph.
#include "models/family.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace prism {

const std::vector<ModelFamily>& ModelFamilies() {
  static const std::vector<ModelFamily> families = {
      {.name = "llama",
       .hf_classes = {"LlamaForCausalLM"},
       .default_max_position = 2048,
       .from_hf = LlamaFromHf,
       .from_gguf = LlamaFromGguf,
       .gguf_names = &kLlamaGgufNames,
       .build = BuildLlama},
      {.name = "mistral",
       .hf_classes = {"MistralForCausalLM"},
       .default_max_position = 4096 * 32,
       .from_hf = LlamaFromHf,
       .from_gguf = LlamaFromGguf,
       .gguf_names = &kLlamaGgufNames,
       .build = BuildLlama},
      {.name = "qwen2",
       .hf_classes = {"Qwen2ForCausalLM"},
       .default_max_position = 32768,
       .attention_bias = true,
       .from_hf = LlamaFromHf,
       .from_gguf = LlamaFromGguf,
       .gguf_names = &kLlamaGgufNames,
       .build = BuildLlama},
      {.name = "qwen3",
       .hf_classes = {"Qwen3ForCausalLM"},
       .default_max_position = 32768,
       .qk_norm = true,
       .from_hf = LlamaFromHf,
       .from_gguf = LlamaFromGguf,
       .gguf_names = &kLlamaGgufNames,
       .build = BuildLlama},
      {.name = "gpt2",
       .hf_classes = {"GPT2LMHeadModel", "GPT2Model"},
       .default_max_position = 1024,
       .attention_bias = true,
       .rotary = false,
       .from_hf = Gpt2FromHf,
       .from_gguf = Gpt2FromGguf,
       .gguf_names = &kGpt2GgufNames,
       .build = BuildGpt2},
  };
  return families;
}

}  // namespace prism
