// src/io/safetensors.hpp - one memory-mapped safetensors file with a validated header.
//
// Format: 8-byte little-endian header length N, N bytes of JSON (an object: tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" object),
// then the data region; offsets are relative to the start of the data region.
// Validation at open (every failure throws mhc::Error naming the file and the tensor):
// file size >= 8, N within the file and <= kMaxHeaderBytes, the header is valid JSON without
// duplicate names, every entry well typed, begin <= end <= data size, end - begin equal to
// numel * dtype size (for the dtypes whose size is known), and no two tensors overlapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mhc::io {

/// Largest header accepted (the safetensors reference implementation uses the same bound).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

/// Bytes per element of a safetensors dtype string; 0 when the size is not known here
/// (sub-byte packed types): such tensors are range- and overlap-checked only.
int safetensors_dtype_size(const std::string& dtype);

/// A read-only memory mapping of a whole file. Move-only.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

/// One header entry; begin/end are relative to the data region.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A mapped safetensors file whose header has been validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  /// The entry of `name`, or null.
  const SafetensorsEntry* find(const std::string& name) const;
  /// First byte of an entry's data (not aligned: read through memcpy).
  const uint8_t* data(const SafetensorsEntry& e) const { return map_.data() + data_start_ + e.begin; }

 private:
  std::string path_;
  MappedFile map_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

/// "[a, b, c]".
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace mhc::io
