// ModelConfig's invariants (what a family reads into it is the family's: models/family.h).
#include "io/formats/model_config.h"

#include "ir/error.h"

namespace prism {

void ValidateModelConfig(const ModelConfig& c, const std::string& source, bool rotary) {
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
  if (c.num_experts > 0) {
    positive(c.experts_per_token, "experts_per_token");
    positive(c.moe_intermediate_size, "moe_intermediate_size");
    if (c.experts_per_token > c.num_experts)
      throw Error(source + ": experts_per_token " + std::to_string(c.experts_per_token) +
                  " exceeds num_experts " + std::to_string(c.num_experts));
  }
  if (rotary && c.head_dim % 2 != 0)
    throw Error(source + ": head_dim " + std::to_string(c.head_dim) + " must be even for rope");
}

}  // namespace prism
