# Checkpoint reading (config.json, safetensors): sources and the libraries they need.
set(MHC_IO_SOURCES)
set(MHC_IO_LIBS)
