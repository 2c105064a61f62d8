// Errors as OpenAI's API returns them: an HTTP status and
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
// so that the official clients raise their usual exceptions (BadRequestError for 400,
// AuthenticationError for 401, ...).
#pragma once

#include <string>

namespace ssmkit::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty: null
  std::string code;   // a machine-readable code; empty: null

  // 400 invalid_request_error naming `param`.
  static ApiError BadRequest(std::string param, std::string message);
  // 500 server_error (an engine failure).
  static ApiError Internal(std::string message);
  std::string ToJson() const;
};

}  // namespace ssmkit::server
