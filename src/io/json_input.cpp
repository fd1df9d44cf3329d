// src/io/json_input.cpp - regular-file reading and the strict JSON parser (see json_input.hpp).
#include "src/io/json_input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "mhc/config.hpp"
#include "mhc/error.hpp"

namespace mhc::io {

using nlohmann::json;

void require_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  MHC_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot read the ", what, ": ", std::strerror(errno));
  MHC_CHECK(S_ISREG(st.st_mode), path, ": the ", what, " is not a regular file (",
            S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket", ")");
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what) {
  require_regular_file(path, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MHC_CHECK(fd >= 0, path, ": cannot open the ", what, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MHC_FAIL(path, ": the ", what, " is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    MHC_FAIL(path, ": the ", what, " has ", st.st_size, " bytes, more than the limit of ", max_bytes);
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      MHC_FAIL(path, ": read error in the ", what, ": ", std::strerror(err));
    }
    if (got == 0) break;
    if (text.size() + static_cast<size_t>(got) > max_bytes) {
      ::close(fd);
      MHC_FAIL(path, ": the ", what, " grew past the limit of ", max_bytes, " bytes while being read");
    }
    text.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  return text;
}

namespace {

// One open array or object while parsing: its keys (objects) and the key it sits under.
struct Level {
  bool object;
  std::string under;  // the enclosing object's key ("" at the top or inside an array)
  std::set<std::string> keys;
  std::string last_key;
};

std::string where(const std::vector<Level>& stack) {
  std::string path;
  for (size_t i = 1; i < stack.size(); ++i) {
    if (!stack[i].under.empty()) path += (path.empty() ? "" : ".") + stack[i].under;
  }
  return path.empty() ? "the top-level object" : "'" + path + "'";
}

}  // namespace

json parse_untrusted_json(const char* begin, const char* end, const std::string& source, const char* what) {
  MHC_CHECK(!(end - begin >= 3 && static_cast<unsigned char>(begin[0]) == 0xEF &&
              static_cast<unsigned char>(begin[1]) == 0xBB && static_cast<unsigned char>(begin[2]) == 0xBF),
            source, ": invalid ", what, ": starts with a UTF-8 byte order mark (JSON text must not)");
  std::vector<Level> stack;
  const json::parser_callback_t on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        MHC_CHECK(stack.size() < static_cast<size_t>(kMaxJsonDepth), source, ": invalid ", what,
                  ": arrays and objects nest deeper than ", kMaxJsonDepth, " levels (mhc::kMaxJsonDepth)");
        std::string under = !stack.empty() && stack.back().object ? stack.back().last_key : std::string();
        stack.push_back({event == json::parse_event_t::object_start, std::move(under), {}, {}});
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key:
        if (!stack.empty() && parsed.is_string()) {
          Level& level = stack.back();
          level.last_key = parsed.get_ref<const std::string&>();
          MHC_CHECK(level.keys.insert(level.last_key).second, source, ": invalid ", what, ": key '", level.last_key,
                    "' appears twice in ", where(stack));
        }
        break;
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, on_event);
  } catch (const json::exception& e) {
    MHC_FAIL(source, ": invalid ", what, " (", end - begin, " bytes): ", e.what());
  }
}

std::string describe(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " element(s)";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " key(s)";
  std::string text = v.dump();
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

}  // namespace mhc::io
