"""QA parsing (JSON and Python list syntax, never eval), splits and the Hugging Face conversion."""

from __future__ import annotations

import pytest

from autofocus.skb.errors import SKBFormatError
from autofocus.skb.qa import QAItem, load_qa, parse_answer_ids, splits_available


@pytest.mark.parametrize(
    ("text", "expected"),
    [("[1, 2]", [1, 2]), ("[]", []), ("[3,4]", [3, 4]), ("(5, 6)", [5, 6]), (" [7] ", [7])],
)
def test_parse_answer_ids(text, expected):
    assert parse_answer_ids(text) == expected


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "[1, 'a']", "[True]", "[-1]", "{1: 2}", "7", "[1.5]", "[1,"],
)
def test_parse_answer_ids_rejects(text):
    with pytest.raises(ValueError):
        parse_answer_ids(text)


def test_load_qa_dir_format(tiny_skb_dir):
    items = load_qa(tiny_skb_dir)
    assert len(items) == 6
    assert items[0] == QAItem(0, "Which papers by Ada Lovelace were published at NeurIPS?", [0, 11])
    assert [q.id for q in load_qa(tiny_skb_dir, "test")] == [5, 4]  # the split file's order
    assert splits_available(tiny_skb_dir) == {"test": 2, "train": 3, "val": 1}
    with pytest.raises(KeyError):
        load_qa(tiny_skb_dir, "nope")


def test_whole_file_split_and_extra_columns(tmp_path):
    (tmp_path / "qa.csv").write_text('id,query,answer_ids,note\n0,"q0","[1]",x\n1,"q1","[2, 3]",y\n')
    (tmp_path / "qa_human.csv").write_text('query,id,answer_ids\n"h0",0,[4]\n')
    assert splits_available(tmp_path) == {"human": 1}
    assert load_qa(tmp_path, "human") == [QAItem(0, "h0", [4])]
    assert load_qa(tmp_path)[1].answer_ids == [2, 3]


def test_load_qa_raises_with_lines(tmp_path):
    (tmp_path / "qa.csv").write_text('id,query,answer_ids\n0,"fine",[1]\n1,"broken","[1, x]"\n')
    with pytest.raises(SKBFormatError) as info:
        load_qa(tmp_path)
    assert [tuple(i)[:2] for i in info.value.issues] == [("qa.csv", 3)]
    (tmp_path / "qa.csv").write_text("id,question\n")
    with pytest.raises(SKBFormatError, match="header lacks column"):
        load_qa(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_qa(tmp_path / "elsewhere")
