// The OpenAI API's generation and embedding requests, parsed and checked field by field.
#include "server/api_request.h"

#include <cmath>

#include "server/api_error.h"

namespace prism {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

ApiError WrongType(const std::string& field, const char* want, const json& got) {
  return BadRequest("'" + field + "' must be " + want + ", not " + TypeName(got), field);
}

// The field's value when present and not null.
const json* Field(const json& body, const std::string& name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double Number(const json& body, const std::string& name, double def, double lo, double hi) {
  const json* v = Field(body, name);
  if (!v) return def;
  if (!v->is_number()) throw WrongType(name, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw BadRequest("'" + name + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                         ", not " + v->dump(),
                     name);
  return x;
}

int64_t Integer(const json& body, const std::string& name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = Field(body, name);
  if (!v) return def;
  if (!v->is_number_integer()) throw WrongType(name, "an integer", *v);
  // Unsigned values past int64's range arrive as uint64: compare in double to reject them too.
  const double x = v->is_number_unsigned() ? (double)v->get<uint64_t>() : (double)v->get<int64_t>();
  if (x < (double)lo || x > (double)hi)
    throw BadRequest("'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                         ", not " + v->dump(),
                     name);
  return v->get<int64_t>();
}

bool Bool(const json& body, const std::string& name, bool def) {
  const json* v = Field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) throw WrongType(name, "a boolean", *v);
  return v->get<bool>();
}

// A message's content: a string, or OpenAI's list of parts of which only text is taken.
std::string Content(const json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw WrongType(field, "a string or an array of content parts", c);
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw BadRequest(
          "'" + field + "' parts must be {\"type\": \"text\", \"text\": ...}; this model reads text only",
          field);
    text += part["text"].get<std::string>();
  }
  return text;
}

json ParseBody(const std::string& body_text) {
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded()) throw BadRequest("the request body is not valid JSON");
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  return body;
}

std::string ModelField(const json& body) {
  const json* m = Field(body, "model");
  if (!m) return "";
  if (!m->is_string()) throw WrongType("model", "a string", *m);
  return m->get<std::string>();
}

// An array of token ids (non-negative integers that fit int32).
std::vector<int32_t> TokenIds(const json& a, const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& x : a) {
    if (!x.is_number_integer() || x.get<double>() < 0 || x.get<double>() > INT32_MAX)
      throw BadRequest("'" + field + "' token ids must be non-negative integers, not " + x.dump(), "input");
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

}  // namespace

EmbeddingRequest ParseEmbeddingRequest(const std::string& body_text) {
  const json body = ParseBody(body_text);
  EmbeddingRequest r;
  r.model = ModelField(body);
  const json* in = Field(body, "input");
  if (!in) throw BadRequest("'input' is required", "input");
  const char* kWant = "a string, an array of strings, an array of token ids or an array of such arrays";
  if (in->is_string()) {
    r.texts.push_back(in->get<std::string>());
  } else if (!in->is_array() || in->empty()) {
    throw BadRequest(std::string("'input' must be ") + kWant + " (not empty)", "input");
  } else if (in->size() > kMaxEmbeddingInputs) {
    throw BadRequest("'input' holds " + std::to_string(in->size()) + " inputs; at most " +
                         std::to_string(kMaxEmbeddingInputs) + " per request",
                     "input");
  } else if ((*in)[0].is_number()) {
    r.token_ids.push_back(TokenIds(*in, "input"));
  } else {
    for (size_t i = 0; i < in->size(); ++i) {
      const json& x = (*in)[i];
      const std::string at = "input[" + std::to_string(i) + "]";
      if (x.is_string() && r.token_ids.empty()) {
        r.texts.push_back(x.get<std::string>());
      } else if (x.is_array() && r.texts.empty()) {
        if (x.empty()) throw BadRequest("'" + at + "' is an empty array of token ids", "input");
        r.token_ids.push_back(TokenIds(x, at));
      } else {
        throw BadRequest(std::string("'input' must be ") + kWant + "; '" + at + "' is " + TypeName(x),
                         "input");
      }
    }
  }
  for (size_t i = 0; i < r.texts.size(); ++i)
    if (r.texts[i].empty()) throw BadRequest("'input' strings must not be empty", "input");
  if (const json* f = Field(body, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw BadRequest("'encoding_format' must be \"float\" or \"base64\", not " + f->dump(),
                       "encoding_format");
    r.base64 = *f == "base64";
  }
  if (Field(body, "dimensions")) r.dimensions = Integer(body, "dimensions", 0, 1, 1 << 20);
  return r;
}

ServeRequest ParseServeRequest(const std::string& body_text, bool chat) {
  const json body = ParseBody(body_text);
  ServeRequest r;
  r.chat = chat;
  r.model = ModelField(body);
  if (chat) {
    const json* msgs = Field(body, "messages");
    if (!msgs) throw BadRequest("'messages' is required", "messages");
    if (!msgs->is_array() || msgs->empty())
      throw BadRequest("'messages' must be a non-empty array", "messages");
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) throw WrongType(at, "an object", m);
      const json* role = Field(m, "role");
      if (!role || !role->is_string()) throw BadRequest("'" + at + ".role' must be a string", at + ".role");
      const json* content = Field(m, "content");
      r.messages.push_back({role->get<std::string>(), content ? Content(*content, at + ".content") : ""});
    }
  } else {
    const json* p = Field(body, "prompt");
    if (!p) throw BadRequest("'prompt' is required", "prompt");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string())
      r.prompt = (*p)[0].get<std::string>();
    else if (p->is_string())
      r.prompt = p->get<std::string>();
    else
      throw BadRequest("'prompt' must be a string (or an array of one string)", "prompt");
  }
  // Completions default to 16 tokens as OpenAI's do; chat to the context's end.
  const char* max_field =
      chat && Field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (Field(body, max_field))
    r.max_tokens = (int)Integer(body, max_field, 0, 1, 1 << 30);
  else if (!chat)
    r.max_tokens = 16;
  r.temperature = (float)Number(body, "temperature", 1.0, 0, 2);
  r.top_p = (float)Number(body, "top_p", 1.0, 0, 1);
  if (r.top_p == 0) r.top_p = 1e-6f;  // keep the most likely token only
  r.min_p = (float)Number(body, "min_p", 0.0, 0, 1);
  r.top_k = (int)Integer(body, "top_k", 0, 0, 1 << 30);
  r.presence_penalty = (float)Number(body, "presence_penalty", 0, -2, 2);
  r.frequency_penalty = (float)Number(body, "frequency_penalty", 0, -2, 2);
  r.n = (int)Integer(body, "n", 1, 1, 16);
  if (Field(body, "seed")) r.seed = (uint64_t)Integer(body, "seed", 0, INT64_MIN, INT64_MAX);
  if (const json* s = Field(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 4) {
      for (const json& x : *s) {
        if (!x.is_string()) throw WrongType("stop", "a string or an array of up to 4 strings", *s);
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw WrongType("stop", "a string or an array of up to 4 strings", *s);
    }
    for (const std::string& x : r.stop)
      if (x.empty()) throw BadRequest("'stop' strings must not be empty", "stop");
  }
  if (chat) {
    if (Bool(body, "logprobs", false)) r.logprobs = (int)Integer(body, "top_logprobs", 0, 0, 20);
  } else {
    r.logprobs = (int)Integer(body, "logprobs", -1, 0, 20);
  }
  r.stream = Bool(body, "stream", false);
  if (const json* so = Field(body, "stream_options")) {
    if (!so->is_object()) throw WrongType("stream_options", "an object", *so);
    if (!r.stream) throw BadRequest("'stream_options' is only allowed with 'stream': true", "stream_options");
    r.include_usage = Bool(*so, "include_usage", false);
  }
  return r;
}

}  // namespace prism
