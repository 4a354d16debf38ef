// Chat-template rendering: the Jinja subset that Hugging Face chat templates use, rendered the way
// transformers' apply_chat_template does (trim_blocks, lstrip_blocks, tojson without ASCII escaping).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace prism {

namespace jinja {
struct Stmt;
class Value;
}  // namespace jinja

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  // Parses once; throws prism::Error with "line:col" for syntax errors and unsupported constructs.
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // extra: more template variables (bos_token, eos_token, tools, ...); they override the defaults
  // tools = none and documents = none, which transformers always passes. raise_exception() in the
  // template becomes a prism::Error carrying exactly the template's message.
  std::string Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::json& extra) const;
  // Same, with messages as JSON objects (for tool_calls, tool_call_id and other fields). JSON object
  // keys arrive sorted (nlohmann::json), so a template that prints a whole message dict sees them so.
  std::string RenderJson(const nlohmann::json& messages, bool add_generation_prompt,
                         const nlohmann::json& extra) const;

  // Reads "chat_template" from tokenizer_config.json: a string, or a list of {name, template} (takes
  // "default"). Falls back to a chat_template.jinja or chat_template.json next to the file.
  static ChatTemplate FromTokenizerConfig(const std::string& tokenizer_config_json_path);
  // The special tokens transformers passes to every template (bos_token, eos_token, unk_token,
  // pad_token, ...), as strings, from tokenizer_config.json; absent or null ones are left out.
  static nlohmann::json SpecialTokens(const std::string& tokenizer_config_json_path);

  const std::string& source() const { return source_; }

 private:
  std::string RenderValue(const jinja::Value& messages, bool add_generation_prompt,
                          const nlohmann::json& extra) const;

  std::string source_;
  std::unique_ptr<std::vector<std::unique_ptr<jinja::Stmt>>> body_;
};

}  // namespace prism
