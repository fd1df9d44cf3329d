// src/io/safetensors.cpp - memory-mapped safetensors files and header validation.
#include "src/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
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

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MHC_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MHC_FAIL(path, ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    MHC_CHECK(p != MAP_FAILED, path, ": mmap of ", size_, " bytes failed: ", std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

// A non-negative JSON integer, or a failure naming the file, the tensor and the field.
uint64_t header_uint(const json& v, const std::string& path, const std::string& name, const char* field) {
  MHC_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), path,
            ": tensor '", name, "': ", field, " must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path) {
  const uint64_t size = map_.size();
  MHC_CHECK(size >= 8, path, ": truncated: ", size,
            " bytes, but a safetensors file starts with an 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, map_.data(), 8);  // little endian (checked above)
  MHC_CHECK(header_len <= size - 8, path, ": header length ", header_len,
            " runs past the end of the file (", size - 8, " bytes follow the length field): truncated or not a safetensors file");
  MHC_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len, " exceeds the limit of ",
            kMaxHeaderBytes, " bytes");
  data_start_ = 8 + header_len;
  const uint64_t data_size = size - data_start_;

  // Parse, noting duplicate top-level names (the parser itself would keep the last silently).
  std::string duplicate;
  std::set<std::string> seen;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  const char* begin = reinterpret_cast<const char*>(map_.data() + 8);
  json header;
  try {
    header = json::parse(begin, begin + header_len, on_event);
  } catch (const json::exception& e) {
    MHC_FAIL(path, ": invalid header JSON (", header_len, " bytes): ", e.what());
  }
  MHC_CHECK(header.is_object(), path, ": invalid header: expected a JSON object, got ", header.type_name());
  MHC_CHECK(duplicate.empty(), path, ": invalid header: tensor '", duplicate, "' is listed twice");

  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& v = item.value();
    if (name == "__metadata__") {
      MHC_CHECK(v.is_object(), path, ": invalid header: __metadata__ must be an object");
      continue;
    }
    MHC_CHECK(v.is_object(), path, ": tensor '", name, "': header entry must be an object, got ", v.dump());
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
    entries_.emplace(name, std::move(e));
  }

  // No two tensors may share bytes.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& kv : entries_) {
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
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace mhc::io
