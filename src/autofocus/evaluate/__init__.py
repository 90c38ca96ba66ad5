"""Evaluation: resumable runs over a QA split, summaries with confidence intervals, paired comparisons, plots."""

from autofocus.evaluate.report import Run, compare_runs, load_run, paired_test, summarize
from autofocus.evaluate.runner import EvalResult, RunMismatchError, build_manifest, evaluate_one, run_eval

__all__ = [
    "EvalResult",
    "Run",
    "RunMismatchError",
    "build_manifest",
    "compare_runs",
    "evaluate_one",
    "load_run",
    "paired_test",
    "run_eval",
    "summarize",
]
