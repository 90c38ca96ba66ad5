"""Adapting a program to one knowledge base by training on its own questions (``autofocus adapt``):
a cross-encoder reranker for step 8 and a type reader for step 1 (``adapt.run``)."""

from autofocus.adapt.run import AdaptResult, adapt

__all__ = ["AdaptResult", "adapt"]
