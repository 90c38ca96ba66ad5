"""The grammar decoder's tokenizer read from a GGUF file (``local_lm.gguf_tokenizer``): a tiny byte-level BPE
model written with the ``gguf`` package's writer (no weights), converted once, saved, read back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autofocus.local_lm import decoding, gguf_tokenizer

gguf = pytest.importorskip("gguf", reason="the gguf package comes with the local-lm extra")

MERGED = ["he", "ll", "hell", "hello", "\u0120w"]  # "Ġw": a space and "w", as byte-level BPE spells it


def _tiny_gguf(path: Path) -> list[str]:
    """A GGUF file holding only a Qwen2-style tokenizer: the 256 byte symbols, five merges, an end token."""
    from tokenizers import pre_tokenizers

    tokens = [*sorted(pre_tokenizers.ByteLevel.alphabet()), *MERGED, "<|im_end|>"]
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_merges(["h e", "l l", "he ll", "hell o", "\u0120 w"])
    writer.add_token_types([1] * (len(tokens) - 1) + [3])  # the last one is a control token
    writer.add_eos_token_id(len(tokens) - 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tokens


def test_the_tokenizer_is_read_from_the_gguf_once_and_saved_beside_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "tiny.gguf"
    tokens = _tiny_gguf(model)
    tokenizer = gguf_tokenizer.load(model)
    ids = tokenizer.tokenize_str("hello world<|im_end|>")
    assert [tokens[i] for i in ids] == ["hello", "\u0120w", "o", "r", "l", "d", "<|im_end|>"]
    assert tokenizer.eos_token == len(tokens) - 1 and tokenizer.decode_str(ids) == "hello world<|im_end|>"
    saved = gguf_tokenizer.saved_dir(model)
    assert saved.parent == tmp_path and (saved / "tokenizer.json").is_file()
    import llguidance.hf
    from transformers import AutoTokenizer

    # read without transformers, the tokenizer is the one llguidance builds from transformers' reading
    via_transformers = llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(str(saved)))
    assert via_transformers.eos_tokens == tokenizer.eos_tokens and via_transformers.tokenize_str("hello world<|im_end|>") == ids

    def no_conversion(path: Path) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_tokenizer, "_convert", no_conversion)
    assert gguf_tokenizer.load(model).tokenize_str("hello") == ids[:1]  # read from the saved folder


def test_a_model_in_a_read_only_folder_keeps_its_tokenizer_in_the_home(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "ro" / "tiny.gguf"
    model.parent.mkdir()
    _tiny_gguf(model)
    gguf_tokenizer.saved_dir(model)  # its checksum is remembered before the folder turns read-only
    monkeypatch.setattr(gguf_tokenizer.os, "access", lambda path, mode: Path(path) != model.parent)
    assert gguf_tokenizer.ensure_saved(model).parent == Path(os.environ["AUTOFOCUS_HOME"]) / "tokenizers"


def test_a_file_that_is_no_gguf_leaves_grammars_to_the_server(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF not really")
    with pytest.warns(UserWarning, match="tokenizer cannot be read"):
        assert decoding.model_tokenizer(bogus) is None
