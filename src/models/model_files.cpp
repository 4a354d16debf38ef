// A model's files opened: config (through its family), weights memory-mapped, tokenizer, chat template.
#include "models/model_files.h"

#include <filesystem>
#include <fstream>

#include "io/formats/expert_stack.h"
#include "io/formats/gguf.h"
#include "io/formats/llama2c.h"
#include "io/formats/safetensors.h"
#include "ir/error.h"
#include "models/family.h"

namespace prism {
namespace fs = std::filesystem;

std::string FindLlama2cTokenizer(const std::string& model_path) {
  fs::path dir = fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::exists(dir / "tokenizer.bin")) return (dir / "tokenizer.bin").string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".bin") return e.path().string();
  }
  throw Error(
      model_path +
      ": no tokenizer found beside the checkpoint (tokenizer.bin or tok*.bin); name one with --tokenizer");
}

ModelFiles OpenModelFiles(const std::string& path, const std::string& tokenizer_path) {
  ModelFiles mf;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file or folder");
  if (fs::is_directory(path)) {
    if (!fs::exists(fs::path(path) / "config.json"))
      throw Error(path + ": not a Hugging Face model folder (no config.json)");
    mf.config = ParseHfConfig((fs::path(path) / "config.json").string());
    mf.weights = StackExperts(LoadSafetensors(path));
    if (FamilyNamed(mf.config.architecture, path, "architecture").encoder)
      mf.pooling = ReadEmbeddingPooling(path);
    mf.tokenizer = LoadHfTokenizer(tokenizer_path.empty() ? path : tokenizer_path);
    fs::path tc = fs::path(path) / "tokenizer_config.json";
    if (fs::exists(tc)) {
      nlohmann::json cfg = nlohmann::json::parse(std::ifstream(tc), nullptr, false);
      if (cfg.is_object() && cfg.contains("chat_template")) {
        mf.chat_template = std::make_shared<ChatTemplate>(ChatTemplate::FromTokenizerConfig(tc.string()));
        mf.chat_variables = ChatTemplate::SpecialTokens(tc.string());
      }
    }
  } else if (fs::path(path).extension() == ".gguf") {
    std::shared_ptr<const GgufFile> gguf = LoadGguf(path);
    mf.config = ConfigFromGguf(*gguf);
    mf.tokenizer = tokenizer_path.empty()
                       ? MakeGgufTokenizer(GgufTokenizerFromMetadata(gguf->Metadata(), gguf->Source()))
                       : LoadHfTokenizer(tokenizer_path);
    auto it = gguf->Metadata().find("tokenizer.chat_template");
    if (it != gguf->Metadata().end() && it->is_string()) {
      mf.chat_template = std::make_shared<ChatTemplate>(it->get<std::string>());
      const Tokenizer& tok = *mf.tokenizer;
      if (tok.BosId() >= 0) mf.chat_variables["bos_token"] = tok.TokenText(tok.BosId());
      if (tok.EosId() >= 0) mf.chat_variables["eos_token"] = tok.TokenText(tok.EosId());
    }
    mf.weights = StackExperts(HfNamedView(gguf));
    if (FamilyNamed(mf.config.architecture, path, "architecture").encoder)
      mf.pooling = EmbeddingPoolingFromGguf(*gguf);
    mf.conv1d_transposed = true;
  } else {
    ModelConfig cfg;
    mf.weights = LoadLlama2c(path, &cfg);
    mf.config = cfg;
    std::string tok = tokenizer_path.empty() ? FindLlama2cTokenizer(path) : tokenizer_path;
    mf.tokenizer = LoadLlama2cTokenizer(tok, (int32_t)cfg.vocab_size);
  }
  if (mf.tokenizer->VocabSize() > mf.config.vocab_size)
    throw Error(path + ": tokenizer has " + std::to_string(mf.tokenizer->VocabSize()) +
                " tokens but the model only " + std::to_string(mf.config.vocab_size));
  return mf;
}

WeightLookup ModelFiles::Lookup() const {
  std::shared_ptr<const WeightStore> store = weights;
  return [store](const std::string& name) -> std::optional<WeightSpec> {
    const TensorData* t = store->Find(name);
    if (!t) return std::nullopt;
    return WeightSpec{t->dtype, t->shape};
  };
}

}  // namespace prism
