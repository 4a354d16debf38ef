// libFuzzer target: any request body either parses into a request within the API's limits or is refused
// with a 400 ApiError whose message is one line; nothing else may happen (no other exception, no crash).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api_error.h"
#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;  // the first byte picks the endpoint
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const prism::ServeRequest r = prism::ParseServeRequest(body, chat);
    if (r.chat != chat || r.n < 1 || r.n > 16 || r.temperature > 2 || (r.max_tokens && *r.max_tokens < 0) || r.logprobs > 20 ||
        !(r.temperature >= 0) || !(r.top_p >= 0 && r.top_p <= 1) || (chat && r.messages.empty()))
      std::abort();  // accepted something the API's limits exclude
  } catch (const prism::ApiError& e) {
    if (e.status != 400 || std::string(e.what()).find('\n') != std::string::npos) std::abort();
  }
  return 0;
}
