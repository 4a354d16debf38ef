// llama2.c checkpoint: header check, exact size check, then HF-named slices of the mapping.
#include "io/formats/llama2c.h"

#include <cstring>

#include "io/formats/mapped_file.h"
#include "ir/error.h"

namespace prism {
namespace {

constexpr int64_t kHeaderBytes = 7 * sizeof(int32_t);
// Caps each header field so that every size product below fits comfortably in int64.
constexpr int64_t kMaxField = int64_t{1} << 24;

class Llama2cStore : public WeightStore {
 public:
  explicit Llama2cStore(const std::string& path) : WeightStore(path, "llama2c") {}

  void Load(ModelConfig* out) {
    const std::string& path = Source();
    auto file = std::make_shared<MappedFile>(path);
    KeepAlive(file);
    if (file->size() < kHeaderBytes)
      throw Error(path + ": truncated file (" + std::to_string(file->size()) +
                  " bytes, the llama2.c header alone is 28)");
    int32_t h[7];
    std::memcpy(h, file->data(), sizeof(h));
    const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4];
    const bool shared = h[5] > 0;
    const int64_t vocab = shared ? h[5] : -int64_t{h[5]};
    const int64_t seq_len = h[6];
    const std::string header = "dim " + std::to_string(dim) + ", hidden_dim " +
                               std::to_string(hidden) + ", n_layers " + std::to_string(layers) +
                               ", n_heads " + std::to_string(heads) + ", n_kv_heads " +
                               std::to_string(kv_heads) + ", vocab_size " +
                               std::to_string(h[5]) + ", seq_len " + std::to_string(seq_len);
    for (int64_t v : {dim, hidden, layers, heads, kv_heads, vocab, seq_len})
      if (v <= 0 || v > kMaxField)
        throw Error(path + ": implausible llama2.c header (" + header + ")");
    if (dim % heads != 0 || heads % kv_heads != 0 || (dim / heads) % 2 != 0)
      throw Error(path + ": inconsistent llama2.c header (" + header +
                  "): dim must split into an even head size and n_heads into n_kv_heads");
    const int64_t head_size = dim / heads;
    const int64_t kv_dim = kv_heads * head_size;

    ModelConfig c;
    c.architecture = "llama";
    c.vocab_size = vocab;
    c.hidden_size = dim;
    c.intermediate_size = hidden;
    c.num_layers = layers;
    c.num_heads = heads;
    c.num_kv_heads = kv_heads;
    c.head_dim = head_size;
    c.max_position = seq_len;
    c.norm_eps = 1e-5;  // run.c's rmsnorm
    c.rope_theta = 10000;
    c.rope_interleaved = true;
    c.tie_word_embeddings = shared;
    c.hidden_act = "silu";
    c.bos_token_id = 1;  // llama2.c tokenizer convention
    c.eos_token_id = 2;
    c.eos_token_ids = {2};

    // Walk run.c's layout once, computing the expected size before touching any data.
    struct Block {
      const char* what;
      int64_t rows_per_layer, cols, count;  // count: stacked copies (layers or 1)
      int64_t offset = 0;
    };
    Block blocks[] = {
        {"token_embedding_table", vocab, dim, 1}, {"rms_att_weight", 1, dim, layers},
        {"wq", heads * head_size, dim, layers},   {"wk", kv_dim, dim, layers},
        {"wv", kv_dim, dim, layers},              {"wo", dim, heads * head_size, layers},
        {"rms_ffn_weight", 1, dim, layers},       {"w1", hidden, dim, layers},
        {"w2", dim, hidden, layers},              {"w3", hidden, dim, layers},
        {"rms_final_weight", 1, dim, 1},          {"freq_cis_real", seq_len, head_size / 2, 1},
        {"freq_cis_imag", seq_len, head_size / 2, 1}, {"wcls", vocab, dim, shared ? 0 : 1},
    };
    int64_t offset = kHeaderBytes;
    for (Block& b : blocks) {
      b.offset = offset;
      offset += b.count * b.rows_per_layer * b.cols * int64_t{sizeof(float)};
    }
    if (offset != file->size())
      throw Error(path + ": file size " + std::to_string(file->size()) +
                  " bytes does not match the llama2.c header (" + header + " needs " +
                  std::to_string(offset) + " bytes)");

    const uint8_t* base = file->data();
    auto add = [&](std::string name, const Block& b, int64_t layer) {
      std::vector<int64_t> shape = b.rows_per_layer == 1 ? std::vector<int64_t>{b.cols}
                                                         : std::vector<int64_t>{b.rows_per_layer, b.cols};
      const int64_t nbytes = b.rows_per_layer * b.cols * int64_t{sizeof(float)};
      AddTensor(TensorData{std::move(name), DType::F32, std::move(shape),
                           base + b.offset + layer * nbytes, nbytes});
    };
    auto find = [&](std::string_view what) -> const Block& {
      for (const Block& b : blocks)
        if (b.what == what) return b;
      throw Error("llama2c: internal layout table lacks " + std::string(what));
    };
    add("model.embed_tokens.weight", find("token_embedding_table"), 0);
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", find("rms_att_weight"), l);
      add(p + "self_attn.q_proj.weight", find("wq"), l);
      add(p + "self_attn.k_proj.weight", find("wk"), l);
      add(p + "self_attn.v_proj.weight", find("wv"), l);
      add(p + "self_attn.o_proj.weight", find("wo"), l);
      add(p + "post_attention_layernorm.weight", find("rms_ffn_weight"), l);
      add(p + "mlp.gate_proj.weight", find("w1"), l);
      add(p + "mlp.down_proj.weight", find("w2"), l);
      add(p + "mlp.up_proj.weight", find("w3"), l);
    }
    add("model.norm.weight", find("rms_final_weight"), 0);
    add("lm_head.weight", shared ? find("token_embedding_table") : find("wcls"), 0);
    if (out) *out = c;
  }
};

}  // namespace

std::unique_ptr<WeightStore> LoadLlama2c(const std::string& path, ModelConfig* config) {
  auto store = std::make_unique<Llama2cStore>(path);
  store->Load(config);
  return store;
}

}  // namespace prism
