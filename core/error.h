// Errors: typed user errors (STRATA_CHECK) versus internal asserts (bugs).
// Reference: PyTorch c10 TORCH_CHECK / TORCH_INTERNAL_ASSERT. Messages are built by streaming
// every argument (`STRATA_CHECK(h % g == 0, "hidden_size ", h, " not divisible by ", g)`), so
// this header needs no formatting library and is usable from .cu files.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

enum class ErrorKind { Value, Config, Io, Runtime, Cuda, Comm };

const char* error_kind_name(ErrorKind kind);

// A user-facing error: bad input, bad config, unreadable file, missing device.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const char* file, int line, const std::string& message);
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without file:line
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  ErrorKind kind_;
  const char* file_;
  int line_;
  std::string message_;
};

namespace detail {
inline void stream_args(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_args(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  stream_args(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  stream_args(os, args...);
  return os.str();
}
[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg);
[[noreturn]] void internal_error(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace strata

#define STRATA_THROW_KIND(kind, ...) \
  ::strata::detail::throw_error(kind, __FILE__, __LINE__, ::strata::detail::concat(__VA_ARGS__))

// User/config error: throws strata::Error carrying file:line and the message.
#define STRATA_CHECK(cond, ...)                                         \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      STRATA_THROW_KIND(::strata::ErrorKind::Value, __VA_ARGS__);       \
    }                                                                   \
  } while (0)

#define STRATA_CHECK_KIND(kind, cond, ...)                              \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      STRATA_THROW_KIND(kind, __VA_ARGS__);                             \
    }                                                                   \
  } while (0)

#define STRATA_THROW(...) STRATA_THROW_KIND(::strata::ErrorKind::Value, __VA_ARGS__)

// Internal invariant: a failure is a bug in Strata. Prints "internal error" and aborts.
#define STRATA_INTERNAL_ASSERT(cond, ...)                                                  \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      ::strata::detail::internal_error(__FILE__, __LINE__, #cond,                          \
                                       ::strata::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                      \
  } while (0)
