"""Format errors of SKB files: every problem names the file, the line and the reason.

Loaders collect problems (up to a cap) instead of stopping at the first, so that one run of
``autofocus skb validate`` shows a user everything that is wrong with their files.
"""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_MAX_ISSUES = 200


class FormatIssue(NamedTuple):
    """One problem: ``line`` is 1-based, ``None`` when the problem is not tied to a line."""

    file: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.reason}"
            if self.line is not None
            else f"{self.file}: {self.reason}"
        )


class SKBFormatError(ValueError):
    """A malformed SKB: ``issues`` lists every problem found (``truncated`` when the cap was hit)."""

    def __init__(self, issues: list[FormatIssue], truncated: bool = False) -> None:
        self.issues = list(issues)
        self.truncated = truncated
        shown = "\n".join(f"  {issue}" for issue in self.issues[:20])
        more = len(self.issues) - 20
        tail = f"\n  ... and {more} more" if more > 0 else ""
        if truncated:
            tail += "\n  (stopped collecting after this many problems)"
        super().__init__(f"{len(self.issues)} problem(s) in the SKB files:\n{shown}{tail}")


class IssueCollector:
    """Accumulates issues up to ``max_issues``; ``raise_if_any`` turns them into one ``SKBFormatError``."""

    def __init__(self, max_issues: int = DEFAULT_MAX_ISSUES) -> None:
        self.max_issues = max_issues
        self.issues: list[FormatIssue] = []
        self.truncated = False

    def add(self, file: str, line: int | None, reason: str) -> None:
        if len(self.issues) >= self.max_issues:
            self.truncated = True
            return
        self.issues.append(FormatIssue(file, None if line is None else int(line), reason))

    def extend(self, issues: list[FormatIssue]) -> None:
        for issue in issues:
            self.add(*issue)

    @property
    def full(self) -> bool:
        return len(self.issues) >= self.max_issues

    def __bool__(self) -> bool:
        return bool(self.issues)

    def raise_if_any(self) -> None:
        if self.issues:
            raise SKBFormatError(self.issues, self.truncated)
