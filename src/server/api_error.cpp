#include "server/api_error.hpp"

#include <nlohmann/json.hpp>

namespace ssmkit::server {

ApiError ApiError::BadRequest(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError ApiError::Internal(std::string message) {
  ApiError e;
  e.http_status = 500;
  e.type = "server_error";
  e.message = std::move(message);
  return e;
}

std::string ApiError::ToJson() const {
  nlohmann::json error = {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  // replace: a message quoting bad input must not make dump() throw on invalid UTF-8.
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

}  // namespace ssmkit::server
