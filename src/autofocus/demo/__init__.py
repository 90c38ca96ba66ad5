"""The offline demo SKB: this Python's standard library as a typed graph with a STaRK-style QA set.

Example:
    >>> from autofocus.demo import build_demo_skb
    >>> build_demo_skb("/tmp/demo").qa_counts["textual"]  # doctest: +SKIP
    {'train': 14, 'val': 9, 'test': 22}
"""

from autofocus.demo.build import DemoBuild, build_demo_skb
from autofocus.demo.stdlib_schema import FULL_MODULES, SMALL_MODULES
from autofocus.demo.stdlib_skb import StdlibGraph, collect_stdlib

__all__ = ["FULL_MODULES", "SMALL_MODULES", "DemoBuild", "StdlibGraph", "build_demo_skb", "collect_stdlib"]
