"""The SKB schema: everything dataset-specific lives here, never in ``if dataset == ...`` branches."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class NodeTypeInfo(BaseModel):
    count: int = 0
    name_field: str = "name"
    attributes: list[str] = Field(default_factory=list)
    # optional: "number" | "date" | "string" | "json" per attribute; undeclared ones are inferred
    attribute_types: dict[str, Literal["number", "date", "string", "json"]] = Field(default_factory=dict)
    description: str = ""


class EdgeTypeInfo(BaseModel):
    count: int = 0
    src_type: str | None = None
    dst_type: str | None = None
    description: str = ""


class Schema(BaseModel):
    """Node types, edge types with their domain and range, candidate (answer) types and a KB description."""

    name: str
    description: str = ""
    node_types: dict[str, NodeTypeInfo]
    edge_types: dict[str, EdgeTypeInfo]
    candidate_types: list[str] | None = None
    source: dict[str, Any] = Field(default_factory=dict)

    @property
    def answer_types(self) -> list[str]:
        """Candidate types, defaulting to all node types as the format specifies."""
        return list(self.candidate_types) if self.candidate_types else list(self.node_types)

