// fuzz/fuzz_config.cpp - libFuzzer driver: bytes as config.json through parse_model_config.
// Every rejection must be an mhc::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "mhc/checkpoint.hpp"
#include "mhc/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)mhc::parse_model_config(text, "fuzz/config.json", "");
  } catch (const mhc::Error&) {
  }
  return 0;
}
