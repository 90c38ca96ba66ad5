"""The retrieval programs: ``steps`` (the parts systems share) and ``systems`` (what composes them)."""
