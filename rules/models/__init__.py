"""The built-in models (`tiny-llama`, `tiny-dit`) and the readers of model files.

Both the resolver (model facts) and the engine (loading weights and tokenizers) read model folders
and GGUF headers, so the readers live here, beside the data they describe, and import nothing heavy.
"""
