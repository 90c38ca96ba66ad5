"""The progress bar of embedding runs, with the time left from the average rate of this run.

Rich's own ``TimeRemainingColumn`` estimates speed from the updates of the last 30 seconds: an
embedding chunk that takes longer than that (2,048 documents at 50 per second) leaves it with one
sample and the bar showed ``-:--:--`` for the whole build. Here the rate is what this run has done
since it started (rows resumed from an earlier run do not count), which is steady for a long build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Task
    from rich.text import Text


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def eta_text(task: Task) -> str:
    """``12.3/s, 0:04:10 left`` from the rows done in this run; ``done in 0:01:02`` at the end."""
    done_here = task.completed - task.fields.get("resumed", 0)
    elapsed = task.elapsed or 0.0
    if task.finished:
        return f"done in {_clock(elapsed)}"
    if done_here <= 0 or elapsed <= 0 or task.total is None:
        return "estimating time left"
    rate = done_here / elapsed
    return f"{rate:,.1f}/s, {_clock((task.total - task.completed) / rate)} left"


def _eta_column() -> object:
    from rich.progress import ProgressColumn

    class EtaColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            from rich.text import Text

            return Text(eta_text(task), style="progress.remaining")

    return EtaColumn()


@contextmanager
def progress_bar(
    enabled: bool, total: int | None, description: str, completed: int = 0
) -> Iterator[Callable[[int], None]]:
    """A bar over ``total`` rows (None: unknown; ``completed`` of them done before); yields ``advance(n)``."""
    if not enabled:
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from autofocus.literal import safe

    columns = (TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(), _eta_column())
    with Progress(*columns) as bar:  # type: ignore[arg-type]
        task = bar.add_task(safe(description), total=total, completed=completed, resumed=completed)
        yield lambda n: bar.advance(task, n)
