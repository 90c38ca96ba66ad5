"""The design card's ``program``: ``steps`` (parts shared by systems) and ``systems`` (what composes them)."""
