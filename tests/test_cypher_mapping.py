"""Step 3 label mapping onto the schema: exact, normalised, closest, strict vs lenient, direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autofocus.cypher import SchemaMapper, mapper_for, parse_cypher
from autofocus.skb.schema import EdgeTypeInfo, NodeTypeInfo, Schema

GOLDEN = Path(__file__).parent / "golden"
SCHEMAS = {
    k: Schema.model_validate(v) for k, v in json.loads((GOLDEN / "cypher_schemas.json").read_text()).items()
}
PRIME, MAG, AMAZON = SCHEMAS["prime"], SCHEMAS["mag"], SCHEMAS["amazon"]


def trips(
    text: str, schema: Schema | SchemaMapper, mode: str = "strict"
) -> list[tuple[str, str | None, str]]:
    qg = parse_cypher(text, schema, mode=mode)  # type: ignore[arg-type]
    return [(t.head, t.rel, t.tail) for t in qg.triplets]


@pytest.mark.parametrize(
    ("label", "expected", "how"),
    [
        ("drug", "drug", "exact"),
        ("gene/protein", "gene/protein", "exact"),
        ("Drug", "drug", "normalised"),
        ("DRUGS", "drug", "normalised"),
        ("diseases", "disease", "normalised"),
        ("Genes/Proteins", "gene/protein", "normalised"),
        ("gene_protein", "gene/protein", "normalised"),
        ("molecular function", "molecular_function", "normalised"),
        ("effect-phenotype", "effect/phenotype", "normalised"),
        ("gene", "gene/protein", "closest"),
        ("protein", "gene/protein", "closest"),
        ("phenotype", "effect/phenotype", "closest"),
        ("pathways_", "pathway", "normalised"),
        ("medication", None, "none"),
        ("symptom", None, "none"),
    ],
)
def test_node_labels(label: str, expected: str | None, how: str) -> None:
    m = SchemaMapper(PRIME).node_type(label)
    assert (m.name, m.how) == (expected, how)


def test_node_label_categories_on_mag() -> None:
    mapper = SchemaMapper(MAG)
    assert mapper.node_type("Papers").name == "paper"
    assert mapper.node_type("field of study").name == "field_of_study"
    assert mapper.node_type("fields_of_studies").name == "field_of_study"
    assert mapper.node_type("publication").name is None


@pytest.mark.parametrize(
    ("label", "head", "tail", "expected", "how"),
    [
        ("indication", "drug", "disease", "indication", "exact"),
        ("Indication", "drug", "disease", "indication", "normalised"),
        ("side_effect", "drug", "effect/phenotype", "side effect", "normalised"),
        ("off_label_use", "drug", "disease", "off-label use", "normalised"),
        ("drug_targets_gene/protein", "drug", "gene/protein", "target", "normalised"),
        (
            "protein/gene_is_associated_with_disease",
            "gene/protein",
            "disease",
            "associated with",
            "normalised",
        ),
        ("drug_indicates_disease", "drug", "disease", "indication", "closest"),
        ("drug_synergistically_interacts_with_drug", "drug", "drug", "synergistic interaction", "closest"),
        ("regulates", "gene/protein", "pathway", None, "none"),
    ],
)
def test_edge_labels_prime(label: str, head: str, tail: str, expected: str | None, how: str) -> None:
    m = SchemaMapper(PRIME).edge_type(label, head, tail)
    assert (m.name, m.how, m.flipped) == (expected, how, False)


@pytest.mark.parametrize(
    "label",
    ["writes", "author_writes_paper", "author___writes___paper", "Writes", "WRITE", "author-writes-paper"],
)
def test_stark_triple_underscore_names(label: str) -> None:
    m = SchemaMapper(MAG).edge_type(label, "author", "paper")
    assert m.name == "author___writes___paper"
    assert not m.flipped


def test_amazon_has_edges_and_endpoint_only_labels() -> None:
    mapper = SchemaMapper(AMAZON)
    assert mapper.edge_type("product_has_brand", "product", "brand").name == "has_brand"
    assert mapper.edge_type("brand", None, None).name == "has_brand"
    assert mapper.edge_type("product_also_buy_product", None, None).name == "also_buy"
    # a label made only of endpoint types maps to the one edge type between them
    m = SchemaMapper(MAG).edge_type("author_institution", "author", "institution")
    assert (m.name, m.how) == ("author___affiliated_with___institution", "endpoints")


def test_direction_is_fixed_and_recorded() -> None:
    qg = parse_cypher("MATCH (p:paper {title: 'x'})-[:writes]->(a:author) RETURN a", MAG)
    assert [(t.head, t.rel, t.tail, t.rel_label) for t in qg.triplets] == [
        ("a", "author___writes___paper", "p", "writes")
    ]
    assert [d.reason for d in qg.dropped] == [
        "direction reversed: edge type author___writes___paper goes author -> paper"
    ]
    undirected = parse_cypher("MATCH (p:paper)-[:writes]-(a:author) RETURN a", MAG)
    assert [(t.head, t.tail, t.directed) for t in undirected.triplets] == [("p", "a", False)]
    assert undirected.dropped == []


def test_endpoint_types_disambiguate_equal_names() -> None:
    schema = Schema(
        name="two-assoc",
        node_types={"gene": NodeTypeInfo(), "disease": NodeTypeInfo(), "phenotype": NodeTypeInfo()},
        edge_types={
            "gene___associated_with___disease": EdgeTypeInfo(src_type="gene", dst_type="disease"),
            "gene___associated_with___phenotype": EdgeTypeInfo(src_type="gene", dst_type="phenotype"),
        },
    )
    text = "MATCH (g:gene)-[:associated_with]->(p:{t} {{name: 'x'}}) RETURN g"
    assert trips(text.format(t="phenotype"), schema) == [("g", "gene___associated_with___phenotype", "p")]
    assert trips(text.format(t="disease"), schema) == [("g", "gene___associated_with___disease", "p")]
    untyped = parse_cypher("MATCH (g)-[:associated_with]->(p {name: 'x'}) RETURN g", schema)
    assert [t.rel for t in untyped.triplets] == [None]  # a tie and no types to break it: strict refuses
    assert "several edge types" in untyped.dropped[0].reason
    lenient = parse_cypher("MATCH (g)-[:associated_with]->(p {name: 'x'}) RETURN g", schema, mode="lenient")
    assert [t.rel for t in lenient.triplets] == ["gene___associated_with___disease"]


def test_strict_and_lenient_on_an_edge_type_that_contradicts_its_endpoints() -> None:
    text = "MATCH (d:drug)-[:ppi]->(x:disease {name: 'asthma'}) RETURN d"
    strict = parse_cypher(text, PRIME, mode="strict")
    lenient = parse_cypher(text, PRIME, mode="lenient")
    assert [(t.rel, t.rel_label) for t in strict.triplets] == [(None, "ppi")]
    assert [(t.rel, t.rel_label) for t in lenient.triplets] == [("ppi", "ppi")]
    assert strict.dropped[0].reason.endswith("dropped")
    assert lenient.dropped[0].reason.endswith("kept as a hint")
    assert (
        {s.type for s in strict.symbols.values()}
        == {s.type for s in lenient.symbols.values()}
        == {
            "drug",
            "disease",
        }
    )


def test_strict_and_lenient_on_unknown_labels() -> None:
    text = "MATCH (g:gene/protein)-[:regulates]->(p:biochemical_route {name: 'Wnt'}) RETURN g"
    for mode in ("strict", "lenient"):
        qg = parse_cypher(text, PRIME, mode=mode)  # type: ignore[arg-type]
        assert qg.symbols["p"].type is None and qg.symbols["p"].label == "biochemical_route"
        assert [(t.rel, t.rel_label) for t in qg.triplets] == [(None, "regulates")]
        assert sorted(d.reason for d in qg.dropped) == [
            "label matches no node type of the schema",
            "relationship type matches no edge type of the schema",
        ]


def test_ambiguous_node_label_strict_vs_lenient() -> None:
    schema = Schema(
        name="ambiguous",
        node_types={"gene_product": NodeTypeInfo(), "gene_family": NodeTypeInfo(), "drug": NodeTypeInfo()},
        edge_types={},
    )
    strict = parse_cypher("MATCH (g:gene {name: 'x'}) RETURN g", schema, mode="strict")
    lenient = parse_cypher("MATCH (g:gene {name: 'x'}) RETURN g", schema, mode="lenient")
    assert strict.symbols["g"].type is None
    assert lenient.symbols["g"].type == "gene_product"
    assert "several node types" in strict.dropped[0].reason
    assert "kept as a hint" in lenient.dropped[0].reason


def test_alternative_relationship_types() -> None:
    qg = parse_cypher("MATCH (d:drug)-[:indication|off_label_use|cures]->(x:disease) RETURN d", PRIME)
    [t] = qg.triplets
    assert (t.rel, t.rel_alternatives, t.rel_label, t.edge_types) == (
        "indication",
        ["off-label use"],
        "indication|off_label_use|cures",
        ["indication", "off-label use"],
    )
    assert [d.text for d in qg.dropped] == ["[:cures]"]


def test_alternatives_in_opposite_directions_match_either_way() -> None:
    qg = parse_cypher("MATCH (a:author)-[:writes|affiliated_with]->(x) RETURN a", MAG)
    assert [(t.rel, t.rel_alternatives, t.directed) for t in qg.triplets] == [
        ("author___writes___paper", ["author___affiliated_with___institution"], True)
    ]
    flipped = parse_cypher("MATCH (p:paper)-[:writes|has_topic]->(x) RETURN p", MAG)
    [t] = flipped.triplets
    assert t.directed is False  # writes reaches a paper from an author, has_topic leaves a paper
    assert "opposite ways" in flipped.dropped[0].reason


def test_types_are_inferred_from_edge_domains() -> None:
    qg = parse_cypher("MATCH (x {name: 'asthma'})<-[:indication]-(d) RETURN d", PRIME)
    assert (qg.symbols["x"].type, qg.symbols["d"].type, qg.target_type) == ("disease", "drug", "drug")
    assert (qg.symbols["x"].label, qg.symbols["d"].label) == (None, None)
    wildcard = parse_cypher("MATCH (g:gene/protein)-[:associated_with]->(x {name: 'y'}) RETURN x", PRIME)
    assert wildcard.symbols["x"].type is None  # 'associated with' has no fixed range


def test_target_type_argument_is_mapped() -> None:
    qg = parse_cypher("MATCH (y)-[:indication]->(x:disease {name: 'a'}) RETURN y", PRIME, target_type="Drugs")
    assert qg.target_type == "drug"
    bad = parse_cypher("MATCH (y {name: 'a'}) RETURN y", PRIME, target_type="spaceship")
    assert bad.target_type is None
    assert "target type" in bad.dropped[0].reason


def test_description_is_an_alias() -> None:
    schema = Schema(
        name="aliases",
        node_types={"drug": NodeTypeInfo(), "disease": NodeTypeInfo()},
        edge_types={
            "treats": EdgeTypeInfo(src_type="drug", dst_type="disease", description="drug_indicates_disease"),
            "contraindication": EdgeTypeInfo(src_type="drug", dst_type="disease"),
        },
    )
    m = SchemaMapper(schema).edge_type("drug_indicates_disease", "drug", "disease")
    assert (m.name, m.how) == ("treats", "normalised")


def test_threshold_is_tunable_through_a_mapper() -> None:
    text = "MATCH (d:drug)-[:drug_indicates_disease]->(x:disease) RETURN d"
    assert trips(text, PRIME) == [("d", "indication", "x")]
    assert trips(text, SchemaMapper(PRIME, min_similarity=0.9)) == [("d", None, "x")]


def test_without_schema_labels_pass_through() -> None:
    qg = parse_cypher("MATCH (p:Papers)-[:WRITES|x]->(a) RETURN a", target_type="Author")
    assert (qg.symbols["p"].type, qg.symbols["a"].type) == ("Papers", "Author")
    assert [(t.rel, t.rel_alternatives) for t in qg.triplets] == [("WRITES", ["x"])]
    assert qg.dropped == []


def test_mapper_is_cached_per_schema_object() -> None:
    assert mapper_for(PRIME) is mapper_for(PRIME)
    assert mapper_for(PRIME) is not mapper_for(MAG)
    copy = PRIME.model_copy(deep=True)
    assert mapper_for(copy) is not mapper_for(PRIME)


def test_bad_mode_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="strict"):
        parse_cypher("MATCH (a) RETURN a", PRIME, mode="Strict")  # type: ignore[arg-type]
