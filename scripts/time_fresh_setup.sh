#!/usr/bin/env bash
# Times `make demo`, then `make test`, as a new user meets them: a fresh clone of this repository's HEAD,
# an empty autofocus home, no pip cache and no build cache (all in a new temporary folder). Prints the
# machine (CPU model, cores, the instruction-set flags llama.cpp cares about), the commit and both times;
# the full output is in the folder's demo.log and test.log. Run it on a quiet machine.
#   scripts/time_fresh_setup.sh [repository]   (default: the repository this script is in)
set -euo pipefail
repo="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && git rev-parse --show-toplevel)"
work="$(mktemp -d /tmp/autofocus-fresh-XXXXXX)"
git clone -q "$repo" "$work/autofocus"
export AUTOFOCUS_HOME="$work/home" XDG_CACHE_HOME="$work/cache" PIP_NO_CACHE_DIR=1
unset AUTOFOCUS_LLAMA_SERVER AUTOFOCUS_LLM_SERVER
cd "$work/autofocus"
echo "commit $(git rev-parse --short HEAD); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs); $(nproc) cores"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512f|avx512_bf16|avx512_vnni|avx_vnni|amx_tile)$' | sort | xargs)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
SECONDS=0
make demo > demo.log 2>&1 || { tail -30 demo.log; exit 1; }
demo=$SECONDS
echo "make demo: ${demo} s ($(date -u -d @"$demo" +%M:%S)); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E "llama.cpp server:|compiled from source|tokenizer saved|ready at" demo.log || true
SECONDS=0
make test > test.log 2>&1 || { tail -30 test.log; exit 1; }
echo "make test: ${SECONDS} s ($(date -u -d @"$SECONDS" +%M:%S)); $(grep -E '^[0-9]+ passed' test.log | tail -1)"
echo "logs in $work (remove it when done)"
