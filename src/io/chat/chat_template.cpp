// ChatTemplate: loads a template from tokenizer_config.json, parses it once, and renders conversations.
#include "io/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/chat/jinja_ast.h"
#include "io/chat/jinja_eval.h"
#include "ir/error.h"

namespace prism {
namespace {

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("invalid JSON in " + path + ": " + e.what());
  }
}

// "chat_template" is a string, or (multi-template tokenizers) a list of {name, template}.
std::string PickTemplate(const nlohmann::json& value, const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template"))
        throw Error(path + ": chat_template list entries need \"name\" and \"template\"");
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    throw Error(path + ": chat_template list has no \"default\" entry (has: " + names + ")");
  }
  throw Error(path + ": chat_template must be a string or a list of {name, template}");
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), body_(std::make_unique<jinja::Body>(jinja::Parse(jinja::Lex(source_)))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  std::vector<jinja::Value> values;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;  // role before content, as a Python caller would build it
    d.entries = {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}};
    values.push_back(jinja::Value::MakeDict(std::move(d)));
  }
  return RenderValue(jinja::Value::List(std::move(values)), add_generation_prompt, extra);
}

std::string ChatTemplate::RenderJson(const nlohmann::json& messages, bool add_generation_prompt,
                                     const nlohmann::json& extra) const {
  if (!messages.is_array()) throw Error("ChatTemplate::RenderJson: messages must be a JSON array");
  return RenderValue(jinja::Value::FromJson(messages), add_generation_prompt, extra);
}

std::string ChatTemplate::RenderValue(const jinja::Value& messages, bool add_generation_prompt,
                                      const nlohmann::json& extra) const {
  jinja::Dict context;
  context.Set("messages", messages);
  context.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.Set("tools", jinja::Value::None());
  context.Set("documents", jinja::Value::None());
  if (!extra.is_null()) {
    if (!extra.is_object())
      throw Error("ChatTemplate::Render: extra must be a JSON object, got " + std::string(extra.type_name()));
    for (const auto& [k, v] : extra.items()) context.Set(k, jinja::Value::FromJson(v));
  }
  try {
    return jinja::Render(*body_, context);
  } catch (const jinja::TemplateRaised& raised) {
    throw Error(raised.message);
  }
}

ChatTemplate ChatTemplate::FromTokenizerConfig(const std::string& path) {
  nlohmann::json config = ReadJsonFile(path);
  if (config.contains("chat_template") && !config["chat_template"].is_null())
    return ChatTemplate(PickTemplate(config["chat_template"], path));
  // Newer transformers save the template beside the config instead.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (std::filesystem::exists(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ChatTemplate(ss.str());
  }
  if (std::filesystem::exists(dir / "chat_template.json")) {
    std::string side = (dir / "chat_template.json").string();
    nlohmann::json j = ReadJsonFile(side);
    if (j.contains("chat_template")) return ChatTemplate(PickTemplate(j["chat_template"], side));
  }
  throw Error(path + " has no chat_template (and there is no chat_template.jinja beside it)");
}

nlohmann::json ChatTemplate::SpecialTokens(const std::string& path) {
  nlohmann::json config = ReadJsonFile(path);
  nlohmann::json out = nlohmann::json::object();
  for (const char* key :
       {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const nlohmann::json& v = config[key];
    // Either a plain string or an AddedToken object {"content": ..., "lstrip": ...}.
    if (v.is_string())
      out[key] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      out[key] = v["content"];
  }
  return out;
}

}  // namespace prism
