// fuzz/fuzz_safetensors.cpp - libFuzzer driver: the bytes of a safetensors file (8-byte header
// length, header JSON, data) through the header parser. Every rejection must be an mhc::Error;
// anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mhc/error.hpp"
#include "src/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > size - 8) header_len = size - 8;  // the file reader rejects this earlier
  try {
    const auto entries = mhc::io::parse_safetensors_header("fuzz/model.safetensors", reinterpret_cast<const char*>(data + 8),
                                                           header_len, size - 8 - header_len);
    (void)entries;
  } catch (const mhc::Error&) {
  }
  return 0;
}
