"""The offline LM: GGUF models from PyPI part wheels, served by llama.cpp as an OpenAI-compatible endpoint."""
