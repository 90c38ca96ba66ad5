"""autofocus: AF-Retriever as a declarative DSPy program over semi-structured knowledge bases."""

from autofocus import _env  # noqa: F401  (sets DSPY_CACHEDIR etc. before anything imports dspy)
from autofocus.config import AutofocusConfig
from autofocus.query_graph import QueryGraph

__version__ = "0.1.0"

__all__ = ["AutofocusConfig", "QueryGraph", "__version__"]
