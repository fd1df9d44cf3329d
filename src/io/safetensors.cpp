// src/io/safetensors.cpp - safetensors files (read with pread) and header validation.
#include "src/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "mhc/error.hpp"
#include "src/io/json_input.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors reader assumes a little-endian host"
#endif

namespace mhc::io {

using nlohmann::json;

int safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8},
  };
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

ReadFile::ReadFile(const std::string& path) : path_(path) {
  require_regular_file(path, "safetensors file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MHC_CHECK(fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    MHC_FAIL(path, ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read(uint64_t offset, uint64_t count, void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < count) {
    const uint64_t want = std::min<uint64_t>(count - done, uint64_t{1} << 30);
    const ssize_t got = ::pread(fd_, out + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    MHC_CHECK(got >= 0, path_, ": read error at byte ", offset + done, ": ", std::strerror(errno));
    MHC_CHECK(got > 0, path_, ": truncated: bytes [", offset, ", ", offset + count, ") were expected, the file ends at ",
              offset + done, " (changed since it was opened?)");
    done += static_cast<uint64_t>(got);
  }
}

namespace {

// A non-negative JSON integer, or a failure naming the file, the tensor and the field.
uint64_t header_uint(const json& v, const std::string& path, const std::string& name, const char* field) {
  MHC_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), path,
            ": tensor '", name, "': ", field, " must hold non-negative integers, got ", describe(v));
  return v.get<uint64_t>();
}

}  // namespace

std::map<std::string, SafetensorsEntry> parse_safetensors_header(const std::string& path, const char* text,
                                                                 uint64_t header_len, uint64_t data_size) {
  MHC_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len, " exceeds the limit of ",
            kMaxHeaderBytes, " bytes");
  const json header = parse_untrusted_json(text, text + header_len, path, "header JSON");
  MHC_CHECK(header.is_object(), path, ": invalid header: expected a JSON object, got ", header.type_name());

  std::map<std::string, SafetensorsEntry> entries;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& v = item.value();
    if (name == "__metadata__") {
      MHC_CHECK(v.is_object(), path, ": invalid header: __metadata__ must be an object");
      continue;
    }
    MHC_CHECK(v.is_object(), path, ": tensor '", name, "': header entry must be an object, got ", describe(v));
    MHC_CHECK(v.contains("dtype") && v["dtype"].is_string(), path, ": tensor '", name,
              "': header entry lacks a string \"dtype\"");
    MHC_CHECK(v.contains("shape") && v["shape"].is_array(), path, ": tensor '", name,
              "': header entry lacks an array \"shape\"");
    MHC_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2, path,
              ": tensor '", name, "': header entry lacks \"data_offsets\": [begin, end]");
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : v["shape"]) {
      const uint64_t extent = header_uint(d, path, name, "shape");
      MHC_CHECK(extent <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path, ": tensor '", name,
                "': shape extent ", extent, " is too large");
      e.shape.push_back(static_cast<int64_t>(extent));
      if (extent != 0 && numel > std::numeric_limits<uint64_t>::max() / extent) overflow = true;
      numel *= extent;
    }
    e.begin = header_uint(v["data_offsets"][0], path, name, "data_offsets");
    e.end = header_uint(v["data_offsets"][1], path, name, "data_offsets");
    MHC_CHECK(e.begin <= e.end, path, ": tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
              "] run backwards");
    MHC_CHECK(e.end <= data_size, path, ": tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
              "] are out of range: the data region has ", data_size, " bytes (truncated file?)");
    const int elem = safetensors_dtype_size(e.dtype);
    if (elem > 0) {
      MHC_CHECK(!overflow && numel <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(elem), path,
                ": tensor '", name, "': shape ", shape_text(e.shape), " is too large");
      MHC_CHECK(e.end - e.begin == numel * static_cast<uint64_t>(elem), path, ": tensor '", name, "': ",
                e.end - e.begin, " data bytes, but shape ", shape_text(e.shape), " of ", e.dtype, " needs ",
                numel * static_cast<uint64_t>(elem));
    }
    entries.emplace(name, std::move(e));
  }

  // No two tensors may share bytes.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& kv : entries) {
    if (kv.second.end > kv.second.begin) order.emplace_back(&kv.first, &kv.second);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsEntry& prev = *order[i - 1].second;
    const SafetensorsEntry& cur = *order[i].second;
    MHC_CHECK(cur.begin >= prev.end, path, ": tensor '", *order[i].first, "' (data_offsets [", cur.begin, ", ",
              cur.end, "]) overlaps tensor '", *order[i - 1].first, "' (data_offsets [", prev.begin, ", ", prev.end,
              "])");
  }
  return entries;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), file_(path) {
  const uint64_t size = file_.size();
  MHC_CHECK(size >= 8, path, ": truncated: ", size,
            " bytes, but a safetensors file starts with an 8-byte header length");
  uint64_t header_len = 0;
  file_.read(0, 8, &header_len);  // little endian (checked above)
  MHC_CHECK(header_len <= size - 8, path, ": header length ", header_len,
            " runs past the end of the file (", size - 8, " bytes follow the length field): truncated or not a safetensors file");
  MHC_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len, " exceeds the limit of ",
            kMaxHeaderBytes, " bytes");
  data_start_ = 8 + header_len;
  std::string text(static_cast<size_t>(header_len), '\0');
  file_.read(8, header_len, text.data());
  entries_ = parse_safetensors_header(path, text.data(), header_len, size - data_start_);
}

std::vector<uint8_t> SafetensorsFile::bytes(const SafetensorsEntry& e) const {
  std::vector<uint8_t> out(static_cast<size_t>(e.end - e.begin));
  file_.read(data_start_ + e.begin, out.size(), out.data());
  return out;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace mhc::io
