// LoadLlama2cTokenizer: llama2.c's tokenizer.bin, encoded and decoded the way llama2.c's run.c does it.
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/tokenizer/pipeline_tokenizer.h"
#include "ir/error.h"

namespace prism {

std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int32_t vocab_size) {
  if (vocab_size <= 0) throw Error(path + ": vocab size must be positive, got " + std::to_string(vocab_size));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open llama2.c tokenizer file");
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();

  size_t pos = 0;
  auto read = [&](void* dst, size_t n, int32_t token) {
    if (pos + n > data.size())
      throw Error(path + ": truncated llama2.c tokenizer (token " + std::to_string(token) + " of " +
                  std::to_string(vocab_size) + ")");
    std::memcpy(dst, data.data() + pos, n);
    pos += n;
  };
  int32_t max_token_length = 0;
  read(&max_token_length, 4, 0);
  if (max_token_length <= 0 || max_token_length > (1 << 16))
    throw Error(path + ": bad max_token_length " + std::to_string(max_token_length) +
                " (not a llama2.c tokenizer?)");

  TokenizerSpec spec;
  spec.vocab.resize(vocab_size);
  std::vector<float> scores(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) {
    int32_t len = 0;
    read(&scores[i], 4, i);
    read(&len, 4, i);
    if (len < 0 || len > max_token_length)
      throw Error(path + ": token " + std::to_string(i) + " has bad length " + std::to_string(len));
    spec.vocab[i].resize(len);
    read(spec.vocab[i].data(), len, i);
  }
  // The exporter writes BOS/EOS as "\n<s>\n" and "\n</s>\n" (for printing); keep the bare names.
  for (int32_t id = 0; id < std::min(vocab_size, 3); ++id) {
    std::string& t = spec.vocab[id];
    size_t b = t.find_first_not_of(" \n"), e = t.find_last_not_of(" \n");
    if (b != std::string::npos) t = t.substr(b, e - b + 1);
  }

  // run.c: prepend a dummy-prefix space to non-empty text, start from code points (bytes as <0xNN>, which
  // llama2.c places at id byte + 3), then merge the adjacent pair whose concatenation has the best score.
  spec.normalizer.AddPrepend(" ");
  BpeOptions options;
  options.byte_fallback = true;
  auto bpe = std::make_unique<BpeModel>(spec.vocab, options);
  bpe->AddMergesFromScores(scores);
  spec.model = std::move(bpe);
  spec.decoder.AddByteFallback();
  spec.decoder.AddFuse();
  spec.strip_space_after_bos = true;
  spec.bos_id = vocab_size > 1 ? 1 : -1;
  spec.eos_id = vocab_size > 2 ? 2 : -1;
  if (spec.bos_id >= 0) spec.prefix_ids.push_back(spec.bos_id);
  spec.special_ids = {0, 1, 2};
  return std::make_unique<PipelineTokenizer>(std::move(spec));
}

}  // namespace prism
