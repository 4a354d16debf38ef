// Tokenizer interface: text <-> ids for Hugging Face, llama2.c and GGUF tokenizers; streaming decode.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prism {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: add what the tokenizer's post-processor adds (usually a leading BOS), as Hugging Face
  // `tokenizers` does with add_special_tokens=True. Special tokens written in the text are always recognised.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special) const = 0;
  // ids wrapped in what the post-processor adds ([CLS] ... [SEP], BOS ...): Encode(t, true) is
  // WithSpecial(Encode(t, false)). For truncating the text's ids before the specials go around them.
  virtual std::vector<int32_t> WithSpecial(std::span<const int32_t> ids) const = 0;
  // skip_special drops special tokens (BOS, EOS, control tokens); unknown ids are ignored. Always valid
  // UTF-8.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;
  virtual int32_t VocabSize() const = 0;                // one past the largest id, added tokens included
  virtual int32_t BosId() const = 0;                    // -1 if none
  virtual int32_t EosId() const = 0;                    // -1 if none
  virtual std::string TokenText(int32_t id) const = 0;  // the raw vocab string ("" for an unknown id)
  virtual std::optional<int32_t> TokenId(std::string_view piece) const = 0;  // inverse of TokenText
  virtual bool IsSpecial(int32_t id) const = 0;  // true for ids that skip_special drops
};

// Incremental detokenizer for streaming. Push(id) returns only newly completed text: never a partial UTF-8
// sequence (byte tokens are held until their character completes), and with SentencePiece's leading-space
// rule applied as Decode applies it to the whole sequence. Concatenating every Push and a final Flush equals
// Decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  // Context already shown to the user (e.g. the prompt's last tokens): later text continues it, so a
  // SentencePiece "▁word" after it keeps its space. Prime resets any pending state.
  void Prime(const std::vector<int32_t>& context);
  std::string Push(int32_t id);
  std::string Flush();  // whatever is still held back (an incomplete character becomes U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> window_;  // context tokens plus tokens not yet emitted
  size_t emitted_ = 0;           // window_[0, emitted_) is already shown
  std::string shown_;            // Decode(window_[0, emitted_))
};

// A tokenizer.json file, or a folder holding tokenizer.json (or vocab.json + merges.txt, byte-level BPE as
// GPT-2 / Qwen2 build it); a tokenizer_config.json beside it supplies bos/eos when present.
std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path);

// llama2.c's tokenizer.bin: int32 max_token_length, then per token float score, int32 length, bytes.
std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& tokenizer_bin, int32_t vocab_size);

// The tokenizer.ggml.* metadata of a GGUF file.
struct GgufTokenizerData {
  std::string model;  // "llama" (SentencePiece BPE), "gpt2" (byte-level BPE) or "bert" (WordPiece)
  std::string pre;    // tokenizer.ggml.pre: "default", "llama-bpe", "qwen2", "smollm", "gpt-2", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   // "a b"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  int32_t cls_id = -1, sep_id = -1;  // WordPiece: [CLS] and [SEP] around the text
  bool add_bos = true;
};
std::unique_ptr<Tokenizer> MakeGgufTokenizer(const GgufTokenizerData& data);
// Reads tokenizer.ggml.* from a GGUF file's metadata; throws "<source>: ..." when it has no tokenizer.
GgufTokenizerData GgufTokenizerFromMetadata(const nlohmann::json& metadata, const std::string& source);

}  // namespace prism
