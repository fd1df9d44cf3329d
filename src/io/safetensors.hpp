// src/io/safetensors.hpp - one safetensors file with a validated header, read with pread().
//
// Format: 8-byte little-endian header length N, N bytes of JSON (an object: tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" object),
// then the data region; offsets are relative to the start of the data region.
// Validation at open (every failure throws mhc::Error naming the file and the tensor):
// a regular file (stat() before open: a FIFO is refused, not waited on), size >= 8, N within the
// file and <= kMaxHeaderBytes, the header is valid JSON (no byte order mark, nesting <=
// kMaxJsonDepth, no key twice in any object), every entry well typed, begin <= end <= data size, end - begin equal to
// numel * dtype size (for the dtypes whose size is known), and no two tensors overlapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mhc/config.hpp"

namespace mhc::io {

using mhc::kMaxHeaderBytes;  // mhc/config.hpp: the largest header accepted

/// Bytes per element of a safetensors dtype string; 0 when the size is not known here
/// (sub-byte packed types): such tensors are range- and overlap-checked only.
int safetensors_dtype_size(const std::string& dtype);

/// A regular file open for reading (pread), with its size at open. Not mapped: a file truncated
/// after opening gives a read error naming it, not SIGBUS. Not copyable.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path);
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  uint64_t size() const { return size_; }
  /// Reads `count` bytes at `offset` into `dst`; throws naming the file when fewer arrive.
  void read(uint64_t offset, uint64_t count, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// One header entry; begin/end are relative to the data region.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// The validated entries of a safetensors header: `json` is the header text (without the 8-byte
/// length), `data_size` the bytes after it. Throws mhc::Error naming `source` and the tensor.
/// (SafetensorsFile's parser, callable on bytes in memory: the fuzz driver uses it.)
std::map<std::string, SafetensorsEntry> parse_safetensors_header(const std::string& source, const char* json,
                                                                 uint64_t size, uint64_t data_size);

/// A safetensors file whose header has been validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  /// The entry of `name`, or null.
  const SafetensorsEntry* find(const std::string& name) const;
  /// The data bytes of an entry (read from the file now; throws when it was truncated since).
  std::vector<uint8_t> bytes(const SafetensorsEntry& e) const;

 private:
  std::string path_;
  ReadFile file_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

/// "[a, b, c]".
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace mhc::io
