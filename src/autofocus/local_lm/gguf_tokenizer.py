"""The tokenizer of a GGUF model for llguidance, read from the file itself: no llama.cpp library needed.

transformers turns a GGUF file's vocabulary, merges and special tokens into a fast tokenizer, the one
llama.cpp's tokenizer implements for the model. transformers 5 reads only the tokenizer's fields (a few
seconds on 2 cores); older releases read the whole file with the ``gguf`` package (a minute). Either
way it is done once per model file, by setup or else on first use, and the tokenizer is saved beside the
model file (in a folder named with its checksum; ``<autofocus home>/tokenizers`` where that folder is
read-only); loading it takes about a second.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from autofocus import paths
from autofocus.local_lm.models import file_sha256


def saved_dir(model_path: Path) -> Path:
    """Where the tokenizer of the model file is kept: named with the file's checksum, as the server's alias
    is, so a changed file gets its own."""
    model_path = Path(model_path).resolve()
    name = f"{model_path.name}.tokenizer-{file_sha256(model_path)[:12]}"
    return model_path.parent / name if os.access(model_path.parent, os.W_OK) else paths.sub("tokenizers") / name


def ensure_saved(model_path: Path) -> Path:
    """The saved tokenizer of ``model_path``, converted from the GGUF file where it is not saved yet."""
    model_path = Path(model_path).resolve()
    out = saved_dir(model_path)
    with paths.locked(paths.sub("tokenizers") / f"{out.name}.lock"):  # not beside a shared model
        if (out / "tokenizer.json").is_file():
            return out
        tokenizer = _convert(model_path)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        try:
            tokenizer.save_pretrained(str(tmp))
            tmp.chmod(0o755)  # mkdtemp makes it private; the model's tokenizer is shared data
            tmp.replace(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _convert(model_path: Path) -> Any:
    """The fast tokenizer a GGUF file describes."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            convert_gguf_tokenizer,
            get_gguf_tokenizer,
        )
    except ImportError:  # transformers 4: the public loader, which parses the whole file
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)
    architecture, vocabulary, config = get_gguf_tokenizer(str(model_path))
    backend, _ = convert_gguf_tokenizer(architecture, vocabulary)
    return PreTrainedTokenizerFast(tokenizer_object=backend, **config)


def load(model_path: Path) -> Any:
    """llguidance's ``LLTokenizer`` of the GGUF model at ``model_path``, built from the saved ``tokenizer.json``
    as ``llguidance.hf.from_tokenizer`` builds it from a transformers tokenizer, without importing
    transformers: that import alone costs seconds of CPU, and this runs beside the first question's steps."""
    from llguidance import LLTokenizer

    folder = ensure_saved(model_path)
    backend = json.loads((folder / "tokenizer.json").read_text())
    backend["padding"] = backend["truncation"] = None
    eos = json.loads((folder / "tokenizer_config.json").read_text()).get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    ids = [t["id"] for t in backend.get("added_tokens", []) if t.get("content") == eos] if eos else []
    return LLTokenizer(json.dumps(backend), eos_token=ids[0] if ids else None)
