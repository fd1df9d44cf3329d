// mhc/error.hpp - the one error type of the library, and the check macro that throws it.
//
// Every failure at the API boundary throws mhc::Error; its what() reads
// "file:line: message", the file relative to the source root. Library code never calls exit()
// or abort().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mhc {

namespace detail {
/// `file` relative to the source root when it lies under the tree this header sits in (the
/// root is this header's own __FILE__ less "include/mhc/error.hpp"), so that error text never
/// carries the build machine's absolute paths; other paths are returned unchanged.
inline const char* source_relative(const char* file) {
  const char* self = __FILE__;
  const char tail[] = "include/mhc/error.hpp";
  const size_t self_len = std::char_traits<char>::length(self), tail_len = sizeof tail - 1;
  if (self_len < tail_len || std::char_traits<char>::compare(self + self_len - tail_len, tail, tail_len) != 0) {
    return file;
  }
  const size_t root_len = self_len - tail_len;
  if (root_len == 0 || std::char_traits<char>::length(file) <= root_len ||
      std::char_traits<char>::compare(file, self, root_len) != 0) {
    return file;
  }
  return file + root_len;
}
}  // namespace detail

/// @brief Error thrown by every mhc entry point. Carries the source location of the check.
class Error : public std::runtime_error {
 public:
  /// @param message what went wrong (names the tensor, the expected and the actual value)
  /// @param file    source file of the failed check (kept relative to the source root)
  /// @param line    source line of the failed check
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(std::string(detail::source_relative(file)) + ":" + std::to_string(line) + ": " + message),
        message_(message),
        file_(detail::source_relative(file)),
        line_(line) {}

  /// @brief The message without the location prefix.
  const std::string& message() const { return message_; }
  /// @brief Source file of the failed check.
  const char* file() const { return file_; }
  /// @brief Source line of the failed check.
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mhc

/// Throws mhc::Error with file:line when `cond` is false; the remaining arguments are streamed
/// into the message.
#define MHC_CHECK(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      throw ::mhc::Error(::mhc::detail::concat(__VA_ARGS__), __FILE__, __LINE__);  \
    }                                                                               \
  } while (0)

/// Unconditionally throws mhc::Error with file:line.
#define MHC_FAIL(...) throw ::mhc::Error(::mhc::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
