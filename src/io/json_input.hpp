// src/io/json_input.hpp - reading untrusted files and JSON (config.json, the index, safetensors
// headers) with the limits of docs/spec.md section 7.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace mhc::io {

/// The whole of a regular file of at most `max_bytes` bytes. The path is checked with stat()
/// before it is opened (and opened non-blocking), so a FIFO, a device or a directory is refused
/// instead of blocking. Every failure throws mhc::Error naming the file and `what` it is.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what);

/// Throws mhc::Error naming `path` unless it is a regular file (stat(), before any open()).
void require_regular_file(const std::string& path, const char* what);

/// Parses untrusted JSON text: no UTF-8 byte order mark, nesting at most kMaxJsonDepth arrays
/// and objects, no key twice in one object. Failures throw mhc::Error naming `source`, `what`
/// and, for a duplicate, the key and where it is.
nlohmann::json parse_untrusted_json(const char* begin, const char* end, const std::string& source, const char* what);
inline nlohmann::json parse_untrusted_json(const std::string& text, const std::string& source, const char* what) {
  return parse_untrusted_json(text.data(), text.data() + text.size(), source, what);
}

/// A short, non-recursive description of an untrusted value for error messages: a scalar as
/// JSON (cut at 64 characters), an array or object by its size.
std::string describe(const nlohmann::json& v);

/// The weight_map of a model.safetensors.index.json: (tensor, shard) pairs, every shard a
/// relative path inside the checkpoint directory (src/io/checkpoint.cpp; the fuzz driver uses it).
std::vector<std::pair<std::string, std::string>> parse_index_json(const std::string& text, const std::string& source);

}  // namespace mhc::io
