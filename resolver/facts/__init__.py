"""Facts: what is true of the machine (presets, probe, files, --fact) and of the model (its
config.json or GGUF header) that a configuration is resolved for."""
