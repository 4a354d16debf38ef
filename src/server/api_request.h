// The OpenAI API's requests (/v1/completions, /v1/chat/completions, /v1/embeddings), parsed and checked
// field by field into what the engine runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/chat/chat_template.h"

namespace prism {

struct ServeRequest {
  bool chat = false;
  std::string model;                  // "" = the server's only model
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat
  std::optional<int> max_tokens;      // none: until a stop, EOS or the context's end
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  float presence_penalty = 0, frequency_penalty = 0;
  int n = 1;          // choices
  int logprobs = -1;  // alternatives per token (-1: no logprobs)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // When the request arrived (time to first token counts from here, a model's load included).
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
};

// Parses a request body; throws ApiError (400) naming the field at fault, with OpenAI's message shape.
ServeRequest ParseServeRequest(const std::string& body, bool chat);

// /v1/embeddings: "input" is a string, an array of strings, an array of token ids or an array of such
// arrays (the ids of the text, without the specials the model puts around it).
struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> texts;               // string inputs
  std::vector<std::vector<int32_t>> token_ids;  // token inputs (one of the two is empty)
  bool base64 = false;                          // encoding_format "base64": little-endian float32 bytes
  std::optional<int64_t> dimensions;
};
// At most this many inputs per request, as OpenAI allows.
constexpr size_t kMaxEmbeddingInputs = 2048;
EmbeddingRequest ParseEmbeddingRequest(const std::string& body);

}  // namespace prism
