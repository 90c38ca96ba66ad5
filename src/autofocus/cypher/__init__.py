"""Step 3: Cypher -> `QueryGraph` (tokenizer, recursive-descent parser, schema mapping) and back.

See `autofocus.cypher.builder` for what is kept, what is dropped and how strict and lenient
mode differ.
"""

from autofocus.cypher.builder import Mode, parse_cypher
from autofocus.cypher.mapping import EdgeMatch, Match, SchemaMapper, mapper_for
from autofocus.cypher.render import to_cypher

__all__ = ["EdgeMatch", "Match", "Mode", "SchemaMapper", "mapper_for", "parse_cypher", "to_cypher"]
