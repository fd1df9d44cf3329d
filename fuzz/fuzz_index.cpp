// fuzz/fuzz_index.cpp - libFuzzer driver: bytes as model.safetensors.index.json through the
// index parser (weight_map, shard path rules). Every rejection must be an mhc::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "mhc/error.hpp"
#include "src/io/json_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)mhc::io::parse_index_json(text, "fuzz/model.safetensors.index.json");
  } catch (const mhc::Error&) {
  }
  return 0;
}
