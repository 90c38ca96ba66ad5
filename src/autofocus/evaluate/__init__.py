"""Evaluation: resumable runs over a QA split, summaries with confidence intervals, paired comparisons, plots.

``autofocus.evaluate(program, split=..., out=...)`` is the public function (``autofocus.api.evaluate``).
Importing this package makes ``autofocus.evaluate`` the package, so the package is callable too: both
spellings run the same function.
"""

import sys
import types
from typing import Any

from autofocus.evaluate.program_runs import Comparison, ProgramRun, compare_systems, evaluate_program
from autofocus.evaluate.report import Run, compare_runs, load_run, paired_test, summarize
from autofocus.evaluate.runner import EvalResult, RunMismatchError, build_manifest, evaluate_one, run_eval

__all__ = [
    "Comparison",
    "EvalResult",
    "ProgramRun",
    "Run",
    "RunMismatchError",
    "build_manifest",
    "compare_runs",
    "compare_systems",
    "evaluate_one",
    "evaluate_program",
    "load_run",
    "paired_test",
    "run_eval",
    "summarize",
]


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> ProgramRun:
        from autofocus.api import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
