// Implements the typed error and the internal-error abort declared in core/error.h.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace strata {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Value: return "ValueError";
    case ErrorKind::Config: return "ConfigError";
    case ErrorKind::Io: return "IoError";
    case ErrorKind::Runtime: return "RuntimeError";
    case ErrorKind::Cuda: return "CudaError";
    case ErrorKind::Comm: return "CommError";
  }
  return "Error";
}

static std::string format_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  return std::string(error_kind_name(kind)) + ": " + msg + " (" + file + ":" + std::to_string(line) + ")";
}

Error::Error(ErrorKind kind, const char* file, int line, const std::string& message)
    : std::runtime_error(format_error(kind, file, line, message)),
      kind_(kind), file_(file), line_(line), message_(message) {}

namespace detail {
void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg) {
  throw Error(kind, file, line, msg);
}
void internal_error(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "strata: internal error at %s:%d: assertion `%s` failed%s%s\n"
               "This is a bug in Strata; please report it.\n",
               file, line, cond, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail
}  // namespace strata
