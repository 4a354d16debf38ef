// An error a client gets back: an HTTP status and OpenAI's JSON error shape, in one line.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace prism {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string param;  // the request field at fault ("" none)
  ApiError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  // {"error": {"message", "type", "param", "code"}} as OpenAI returns it.
  nlohmann::json ToJson() const {
    return {{"error",
             {{"message", what()},
              {"type", type},
              {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
              {"code", nullptr}}}};
  }
};

inline ApiError BadRequest(const std::string& message, const std::string& param = "") {
  return ApiError(400, "invalid_request_error", message, param);
}

}  // namespace prism
