// Tests for chat-template rendering: byte-for-byte parity with Python jinja2 (configured as
// transformers does) on the real templates in shared/tokenizers and on feature snippets, plus errors.
#include "io/chat/chat_template.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "ir/error.h"
#include "test_util.h"

namespace prism {
namespace {

const std::string kDataDir = PRISM_TEST_DATA_DIR;  // tokenizers/
const std::string kScript = std::string(PRISM_SOURCE_DIR) + "/tests/fixtures/render_chat_templates.py";

// The reference renderings, produced once per process by tests/fixtures/render_chat_templates.py.
struct Reference {
  std::optional<nlohmann::json> data;
  std::string skip_reason;  // python3/jinja2 missing: skip
  std::string fail_reason;  // the script itself failed: fail
};

const Reference& GetReference() {
  static const Reference ref = [] {
    Reference r;
    if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
      r.skip_reason = "python3 with jinja2 is not available to produce reference renderings";
      return r;
    }
    auto dir = testing::MakeTempDir("chat-template");
    auto out = dir / "expected.json";
    std::string cmd = "python3 '" + kScript + "' '" + kDataDir + "' '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) {
      r.fail_reason = "reference script failed: " + cmd;
    } else {
      std::ifstream in(out);
      r.data = nlohmann::json::parse(in);
    }
    std::filesystem::remove_all(dir);
    return r;
  }();
  return ref;
}

std::vector<ChatMessage> PlainMessages(const nlohmann::json& messages) {
  std::vector<ChatMessage> out;
  for (const auto& m : messages)
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

// Renders one reference case and compares output, or the error the template raised.
void CheckCase(const ChatTemplate& tmpl, const nlohmann::json& c, const nlohmann::json& extra, bool plain) {
  SCOPED_TRACE(c["name"].get<std::string>() + (c["add_generation_prompt"].get<bool>() ? " +gen" : " -gen"));
  bool agp = c["add_generation_prompt"].get<bool>();
  auto render = [&] {
    return plain ? tmpl.Render(PlainMessages(c["messages"]), agp, extra)
                 : tmpl.RenderJson(c["messages"], agp, extra);
  };
  if (c["expected"].is_string()) {
    try {
      EXPECT_EQ(render(), c["expected"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << "unexpected error: " << e.what();
    }
    return;
  }
  try {
    std::string got = render();
    ADD_FAILURE() << "expected an error (" << c["error"].get<std::string>() << "), got output:\n" << got;
  } catch (const Error& e) {
    if (c["error_kind"] == "raise") {
      EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
    }
  }
}

void CheckModel(const std::string& model) {
  const Reference& ref = GetReference();
  if (!ref.fail_reason.empty()) {
    FAIL() << ref.fail_reason;
  }
  if (!ref.data) {
    GTEST_SKIP() << ref.skip_reason;
  }
  int checked = 0;
  for (const auto& c : (*ref.data)["models"]) {
    if (c["model"] != model) continue;
    const std::string config = c["config"].get<std::string>();
    ChatTemplate tmpl = ChatTemplate::FromTokenizerConfig(config);
    nlohmann::json extra = ChatTemplate::SpecialTokens(config);
    EXPECT_EQ(extra, c["special_tokens"]);
    for (const auto& [k, v] : c["extra"].items()) extra[k] = v;
    CheckCase(tmpl, c, extra, c["plain"].get<bool>());
    ++checked;
  }
  EXPECT_GE(checked, 18) << "no reference cases for " << model << " (missing tokenizer_config.json?)";
}

TEST(ChatTemplateParity, TinyLlama) { CheckModel("tinyllama-1.1b-chat"); }
TEST(ChatTemplateParity, Mistral) { CheckModel("mistral-7b-instruct-v0.3"); }
TEST(ChatTemplateParity, SmolLM2) { CheckModel("smollm2"); }
TEST(ChatTemplateParity, Qwen25) { CheckModel("qwen2.5"); }
TEST(ChatTemplateParity, Phi3) { CheckModel("phi-3-mini"); }

TEST(ChatTemplateParity, FeatureSnippets) {
  const Reference& ref = GetReference();
  if (!ref.fail_reason.empty()) {
    FAIL() << ref.fail_reason;
  }
  if (!ref.data) {
    GTEST_SKIP() << ref.skip_reason;
  }
  int checked = 0;
  for (const auto& c : (*ref.data)["snippets"]) {
    SCOPED_TRACE("snippet " + c["name"].get<std::string>());
    try {
      ChatTemplate tmpl(c["template"].get<std::string>());
      CheckCase(tmpl, c, c["extra"], false);
    } catch (const Error& e) {
      ADD_FAILURE() << "parse error: " << e.what();
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

// ---- Errors ----

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string ParseError(const std::string& source) {
  return ErrorOf([&] { ChatTemplate t(source); });
}

std::string RenderError(const std::string& source, const nlohmann::json& extra = nlohmann::json::object()) {
  return ErrorOf([&] { ChatTemplate(source).Render({{"user", "hi"}}, false, extra); });
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(ParseError("Hello\n{% if x %}\n  {{ 1 + }}\n{% endif %}"),
            "chat template 3:10: expected an expression, got '}}'");
  EXPECT_EQ(ParseError("a\n  {% for m in messages %}{{ m }}"),
            "chat template 2:3: unclosed '{% for %}': missing '{% endfor %}'");
  EXPECT_EQ(ParseError("{% if x %}{% endfor %}"),
            "chat template 1:11: unexpected '{% endfor %}' with no matching open block");
  EXPECT_EQ(ParseError("x {{ 'abc }}"), "chat template 1:6: unterminated string literal");
  EXPECT_EQ(ParseError("{{ a ]] }}"), "chat template 1:6: unexpected ']'");
  EXPECT_EQ(ParseError("{{ a"), "chat template 1:1: unclosed tag '{{'");
  EXPECT_EQ(ParseError("{# never closed"), "chat template 1:1: unclosed comment '{#'");
  EXPECT_EQ(ParseError("{% set x = 1 %}{% break %}"), "chat template 1:16: '{% break %}' outside of a loop");
  EXPECT_EQ(ParseError("{{ x @ y }}"), "chat template 1:6: unexpected character '@'");
}

TEST(ChatTemplateErrors, UnsupportedConstructsAreNamed) {
  EXPECT_EQ(ParseError("ok\n{% include 'other.jinja' %}"),
            "chat template 2:1: unsupported tag '{% include %}'");
  EXPECT_EQ(ParseError("{{ text|wordwrap(10) }}"), "chat template 1:9: unsupported filter 'wordwrap'");
  EXPECT_EQ(ParseError("{% if x is prime %}{% endif %}"), "chat template 1:12: unsupported test 'prime'");
  EXPECT_EQ(ParseError("{% frobnicate %}"), "chat template 1:1: unknown tag '{% frobnicate %}'");
  EXPECT_EQ(ParseError("{% for x in xs recursive %}{% endfor %}"),
            "chat template 1:16: unsupported construct 'recursive' loop");
  EXPECT_EQ(ParseError("{{ f(*args) }}"),
            "chat template 1:6: unsupported construct: *args/**kwargs in a call");
}

TEST(ChatTemplateErrors, RuntimeErrorsNamePosition) {
  EXPECT_EQ(RenderError("{{ missing.attr }}"), "chat template 1:4: 'missing' is undefined");
  EXPECT_EQ(RenderError("\n  {{ messages[0].nope.deeper }}"),
            "chat template 2:17: 'dict object' has no attribute 'nope'");
  EXPECT_EQ(RenderError("{{ 'a' + 1 }}"),
            "chat template 1:8: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(RenderError("{{ 1 // 0 }}"), "chat template 1:6: division by zero");
  EXPECT_EQ(RenderError("{{ undefined_fn() }}"), "chat template 1:4: 'undefined_fn' is undefined");
  EXPECT_EQ(RenderError("{% for x in 5 %}{% endfor %}"), "chat template 1:13: 'int' object is not iterable");
  EXPECT_EQ(RenderError("{% set x = 1 %}{% set x.y = 2 %}"),
            "chat template 1:16: cannot set attribute 'y' on 'x', which is not a namespace()");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTemplateMessage) {
  EXPECT_EQ(RenderError("{{ raise_exception('Roles must alternate!') }}"), "Roles must alternate!");
  ChatTemplate mistral = ChatTemplate::FromTokenizerConfig(
      kDataDir + "/tokenizers/mistral-7b-instruct-v0.3/tokenizer_config.json");
  std::string err = ErrorOf([&] {
    mistral.Render({{"user", "a"}, {"user", "b"}}, true, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  });
  EXPECT_EQ(err,
            "After the optional system message, conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

// ---- Loading ----

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(ChatTemplateLoading, TemplateListTakesDefault) {
  auto dir = testing::MakeTempDir("chat-template-load");
  nlohmann::json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                           {"eos_token", "</s>"},
                           {"unk_token", nullptr},
                           {"chat_template",
                            {{{"name", "tool_use"}, {"template", "TOOLS"}},
                             {{"name", "default"}, {"template", "{{ bos_token }}D"}}}}};
  WriteFile(dir / "tokenizer_config.json", config.dump());
  std::string path = (dir / "tokenizer_config.json").string();
  nlohmann::json specials = ChatTemplate::SpecialTokens(path);
  EXPECT_EQ(specials, (nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(path).Render({}, false, specials), "<s>D");

  config["chat_template"] = {{{"name", "tool_use"}, {"template", "TOOLS"}}};
  WriteFile(dir / "tokenizer_config.json", config.dump());
  EXPECT_NE(ErrorOf([&] { ChatTemplate::FromTokenizerConfig(path); }).find("no \"default\""),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateLoading, SidecarJinjaAndMissingTemplate) {
  auto dir = testing::MakeTempDir("chat-template-load");
  WriteFile(dir / "tokenizer_config.json", R"({"eos_token": "</s>"})");
  std::string path = (dir / "tokenizer_config.json").string();
  EXPECT_NE(ErrorOf([&] { ChatTemplate::FromTokenizerConfig(path); }).find("has no chat_template"),
            std::string::npos);
  WriteFile(dir / "chat_template.jinja", "{% for m in messages %}[{{ m.role }}]{% endfor %}\n");
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(path).Render({{"user", "x"}, {"assistant", "y"}}, false, {}),
            "[user][assistant]");
  std::filesystem::remove_all(dir);
  EXPECT_NE(ErrorOf([] {
              ChatTemplate::FromTokenizerConfig(kDataDir + "/tokenizers/gpt2/tokenizer_config.json");
            }).find("has no chat_template"),
            std::string::npos);
}

// ---- Direct rendering checks (no Python needed) ----

TEST(ChatTemplateRender, ChatMLWithGenerationPrompt) {
  ChatTemplate t(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% "
      "endif %}");
  std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi \"you\" — ü\nthere"}};
  EXPECT_EQ(t.Render(msgs, true, {}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi \"you\" — ü\nthere<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.Render(msgs, false, {}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi \"you\" — ü\nthere<|im_end|>\n");
}

TEST(ChatTemplateRender, ToolsDefaultToNoneAndExtraOverrides) {
  ChatTemplate t(
      "{{ tools is none }}|{{ documents is none }}|{{ tools|length if tools else 0 }}|{{ custom }}");
  EXPECT_EQ(t.Render({}, false, {}), "True|True|0|");
  EXPECT_EQ(t.Render({}, false, {{"tools", {1, 2}}, {"custom", 1.5}}), "False|True|2|1.5");
}

TEST(ChatTemplateRender, GenerationBlockAndLoopControls) {
  ChatTemplate t(
      "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration "
      "%}"
      "{% else %}{{ m.content }}{% continue %}{% endif %};{% endfor %}");
  EXPECT_EQ(t.Render({{"user", "u"}, {"assistant", "a"}}, false, {}), "ua;");
}

}  // namespace
}  // namespace prism
