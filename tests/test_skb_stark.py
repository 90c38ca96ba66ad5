"""The STaRK loader on tiny fixtures in PRIME / MAG / AMAZON layouts (tests/fixtures/make_stark_fixtures.py)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from autofocus.skb.errors import SKBFormatError
from autofocus.skb.io import detect_format, load_skb
from autofocus.skb.qa import load_qa, splits_available
from autofocus.skb.stark import (
    ProfileWarning,
    bundled_profiles,
    find_processed_dir,
    load_stark,
    resolve_profile,
)

FIXTURES = Path(__file__).parent / "fixtures" / "stark"


@pytest.fixture(scope="module")
def prime():
    return load_stark(FIXTURES / "prime_like", progress=False)


@pytest.fixture(scope="module")
def mag():
    return load_stark(FIXTURES / "mag_like", progress=False)


@pytest.fixture(scope="module")
def amazon():
    return load_stark(FIXTURES / "amazon_like", progress=False)


def test_layout_and_profile_detection():
    assert find_processed_dir(FIXTURES / "amazon_like").parts[-2:] == ("cache", "brand-category-color")
    assert find_processed_dir(FIXTURES / "mag_like").name == "processed"
    for name in ("prime", "mag", "amazon"):
        processed = find_processed_dir(FIXTURES / f"{name}_like")
        assert resolve_profile(None, processed).name == name
        assert detect_format(FIXTURES / f"{name}_like") == "stark"
    assert set(bundled_profiles()) == {"prime", "mag", "amazon"}


def test_prime_like(prime):
    assert prime.schema.name == "prime"
    assert prime.node_type_names[:4] == ["disease", "gene/protein", "molecular_function", "drug"]
    assert prime.schema.answer_types == prime.node_type_names  # every type is a candidate
    assert prime.name(2) == "Lepirudin"
    g = prime.graph
    assert g.num_edges("target") == 3  # the duplicate 2 -> 1 collapses; 1 -> 2 and 2 -> 6 stay
    assert g.neighbours(np.array([3]), ["indication"], "out").tolist() == [0]
    assert g.neighbours(np.array([3]), ["off-label use"], "out").tolist() == [0]  # parallel edge kept
    assert g.neighbours(np.array([0]), ["off-label use"], "out").tolist() == []  # directed
    doc = prime.doc(0)
    assert doc.splitlines()[:3] == ["- name: thrombosis", "- type: disease", "- source: MONDO"]
    assert "Formation of a blood clot" in doc
    assert "mondo_id" not in doc and "hidden" not in doc and "umls_description" not in doc  # skipped, 'nan'
    assert "- alias (other gene names): PT; THPH1" in prime.doc(1)
    assert "  - start: 46719213" in prime.doc(1)  # nested dict flattened, numpy int rendered
    assert "details" not in prime.columns and "id" not in prime.columns
    assert prime.columns["source"].get(4) == "REACTOME"
    assert prime.schema.edge_types["target"].src_type is None  # drug->gene and gene->drug
    assert prime.schema.edge_types["ppi"].src_type == "gene/protein"


def test_mag_like(mag):
    assert mag.schema.candidate_types == ["paper"]
    assert mag.candidate_ids.tolist() == [7, 8, 9, 10]
    assert [mag.name(i) for i in (0, 3, 5, 7)] == [
        "Jane Doe", "Massachusetts Institute of Technology", "Machine learning", "Learning on Graphs",
    ]  # fmt: skip
    assert mag.name(2) == "Ann Lee-1"  # '-1' inside a name is not "missing"
    assert not mag.columns["CitationCount"].present[1]  # -1 is missing
    assert mag.columns["CitationCount"].values[0] == 340
    assert mag.columns["Date"].kind == "date" and mag.columns["Date"].display(7) == "2015-06-01"
    assert not mag.columns["Date"].present[9]
    assert mag.columns["Year"].values[9] == 2019
    assert mag.doc(7).splitlines() == [
        "- paper title: Learning on Graphs", "- abstract: We learn node representations.",
        "- publication date: 2015-06-01", "- venue: ICML",
    ]  # fmt: skip
    assert "abstract" not in mag.doc(8) and "- journal: Journal of Graph Theory" in mag.doc(8)
    assert mag.doc(1).splitlines() == ["- author name: John Roe", "- author paper count: 3"]
    info = mag.schema.edge_types["author___writes___paper"]
    assert (info.src_type, info.dst_type, info.count) == ("author", "paper", 5)
    assert mag.graph.neighbours(np.array([9]), ["paper___cites___paper"], "out").tolist() == [7, 8]
    assert mag.graph.neighbours(np.array([9]), ["paper___cites___paper"], "in").tolist() == [10]


def test_amazon_like(amazon):
    assert amazon.schema.candidate_types == ["product"]
    assert [amazon.name(i) for i in (0, 4, 6, 8)] == ["Coleman Sundome Tent", "Coleman", "Camping", "Green"]
    assert amazon.type_of(0) == "product"  # from node_types.pt: product entries have no `type` key
    assert amazon.columns["price"].kind == "number" and amazon.columns["price"].values[2] == 120.5
    assert not amazon.columns["price"].present[3]  # "" is missing
    assert "review" not in amazon.columns and "qa" not in amazon.columns  # nested: documents only
    doc = amazon.doc(0)
    assert doc.startswith("- product: Coleman Sundome Tent\n- brand: Coleman\n- details:\n")
    assert "  #1: summary: Great tent; reviewText: Kept us dry.; vote: 3; overall: 5" in doc
    assert "- Q&A:" in doc and "asin" not in doc
    assert amazon.doc(4) == "- brand name: Coleman"


def test_explicit_and_generic_profiles(tmp_path):
    generic = load_stark(FIXTURES / "amazon_like", profile="none", progress=False)
    assert generic.schema.candidate_types is None
    assert [generic.name(i) for i in (0, 4, 6)] == ["Coleman Sundome Tent", "Coleman", "Camping"]  # detected
    custom = tmp_path / "p.json"
    custom.write_text('{"name": "mine", "candidate_types": ["brand"], "name_fields": {"*": "asin"}}')
    skb = load_stark(FIXTURES / "amazon_like", profile=custom, progress=False)
    assert skb.schema.name == "mine" and skb.candidate_ids.tolist() == [4, 5] and skb.name(1) == "B0002"
    short = load_stark(FIXTURES / "amazon_like", profile={"max_column_chars": 10}, progress=False)
    assert "brand" in short.columns and "global_category" not in short.columns  # long text: documents only
    assert "- global_category: Sports & Outdoors" in short.doc(0)
    with pytest.raises(ValueError, match="unknown profile"):
        load_stark(FIXTURES / "amazon_like", profile="nope", progress=False)
    with pytest.raises(SKBFormatError, match="no node_type_dict"):
        load_stark(FIXTURES / "mag_like", profile="none", progress=False)


def test_stark_qa_and_splits():
    root = FIXTURES / "prime_like"
    assert splits_available(root) == {
        "test-0.1": 1,
        "test": 1,
        "train": 2,
        "val": 1,
        "human_generated_eval": 1,
    }
    train = load_qa(root, "train")
    assert [q.id for q in train] == [0, 1]
    assert train[1].query == "Which drugs are used off-label\nfor thrombosis?"  # multi-line CSV field
    assert train[1].answer_ids == [3]
    assert load_qa(root, "human_generated_eval")[0].query == "what blood thinner works on thrombin"
    assert len(load_qa(root)) == 4
    with pytest.raises(KeyError, match="unknown split"):
        load_qa(root, "dev")


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    return dst


def test_inconsistent_files_are_reported(tmp_path):
    root = _copy(tmp_path, "mag_like")
    torch.save(torch.tensor([[0, 1, 50], [3, 3, 3]]), root / "processed" / "edge_index.pt")
    with pytest.raises(SKBFormatError) as info:
        load_stark(root, progress=False)
    reasons = " | ".join(str(i) for i in info.value.issues)
    assert "edge_types.pt: 17 edge types for 3 edges" in reasons
    assert "edge_index.pt: 1 edge sources are not node ids 0..10 (first: edge 2, id 50)" in reasons

    root = _copy(tmp_path, "prime_like")
    with (root / "processed" / "node_info.pkl").open("rb") as fh:
        info_dict = pickle.load(fh)
    del info_dict[3]
    with (root / "processed" / "node_info.pkl").open("wb") as fh:
        pickle.dump(info_dict, fh)
    with pytest.raises(SKBFormatError, match="entry 3 is missing"):
        load_stark(root, progress=False)


def test_stark_through_load_skb_and_cache(tmp_path):
    root = _copy(tmp_path, "mag_like")
    first = load_skb(root, progress=False)
    second = load_skb(root, progress=False)
    assert isinstance(second.node_type, np.memmap)
    assert first.fingerprint == second.fingerprint
    assert second.doc(7) == first.doc(7) and second.attributes(8) == first.attributes(8)
    other = load_skb(root, progress=False, profile={"name": "x", **_mag_dicts()})
    assert other.fingerprint != first.fingerprint  # the profile is part of the cache key


def _mag_dicts() -> dict:
    mag = bundled_profiles()["mag"]
    return {"node_type_dict": mag.node_type_dict, "edge_type_dict": mag.edge_type_dict}


class Planted:
    """A pickle that runs code when loaded: it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _plant(path: Path, marker: Path) -> None:
    with path.open("wb") as fh:
        pickle.dump(Planted(marker), fh)


def test_a_directory_skb_with_pickles_is_never_taken_for_stark(tiny_skb_dir, tmp_path):
    root = tmp_path / "skb"
    shutil.copytree(tiny_skb_dir, root)
    (root / "nodes.jsonl").unlink()
    marker = tmp_path / "ran"
    for name in ("node_info.pkl", "node_type_dict.pkl"):
        _plant(root / name, marker)
    assert detect_format(root) == "dir"
    with pytest.raises(SKBFormatError, match=r"missing required file .*nodes\.jsonl"):
        load_skb(root, progress=False)
    assert not marker.exists()


def test_an_incomplete_stark_layout_is_reported_before_any_pickle_is_opened(tmp_path):
    root = tmp_path / "partial"
    (root / "processed").mkdir(parents=True)
    marker = tmp_path / "ran"
    for name in ("node_info.pkl", "node_type_dict.pkl", "edge_type_dict.pkl"):
        _plant(root / "processed" / name, marker)
    with pytest.raises(SKBFormatError) as info:
        load_skb(root, progress=False)
    assert {i.file for i in info.value.issues} == {"edge_index.pt", "edge_types.pt", "node_types.pt"}
    with pytest.raises(SKBFormatError):
        resolve_profile(None, root / "processed")
    assert not marker.exists()


def test_type_dictionaries_are_read_as_plain_data_only(tmp_path):
    root = _copy(tmp_path, "prime_like")
    marker = tmp_path / "ran"
    _plant(root / "processed" / "node_type_dict.pkl", marker)
    with pytest.raises(SKBFormatError, match=r"node_type_dict.pkl.*refused to load pathlib"):
        load_skb(root, progress=False)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["node_info.pkl", "edge_index.pt", "node_type_dict.pkl"])
def test_a_truncated_file_is_named(tmp_path, name):
    root = _copy(tmp_path, "prime_like")
    path = root / "processed" / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(SKBFormatError) as info:
        load_stark(root, progress=False)
    assert info.value.issues[0].file == name and "cannot be read" in info.value.issues[0].reason


def test_auto_detection_says_when_no_profile_fits(tmp_path):
    root = _copy(tmp_path, "prime_like")
    with (root / "processed" / "node_type_dict.pkl").open("rb") as fh:
        types = pickle.load(fh)
    with (root / "processed" / "node_type_dict.pkl").open("wb") as fh:
        pickle.dump({k: f"kind-{v}" for k, v in types.items()}, fh)
    with pytest.warns(ProfileWarning, match="no single bundled STaRK profile fits .*--profile"):
        skb = load_stark(root, progress=False)
    assert skb.schema.source["profile"] is None
