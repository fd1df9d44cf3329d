# Checkpoint reading (config.json, safetensors): sources and the libraries they need.
# nlohmann-json is header-only (Debian: nlohmann-json3-dev); it stays out of the public headers.
find_package(nlohmann_json 3.2 REQUIRED)
set(MHC_IO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/json_input.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.cpp
)
set(MHC_IO_LIBS nlohmann_json::nlohmann_json)
