"""Evaluation: resumable runs over a QA split, summaries with confidence intervals, paired comparisons, plots.

``autofocus.evaluate(program, split=..., out=...)`` is the public function (``autofocus.api.evaluate``);
this package is named apart from it, so importing it never shadows the function.
"""

from autofocus.evaluation.program_runs import Comparison, ProgramRun, compare_systems, evaluate_program
from autofocus.evaluation.report import Run, compare_runs, load_run, summarize
from autofocus.evaluation.runner import EvalResult, RunMismatchError, build_manifest, evaluate_one, run_eval
from autofocus.evaluation.statistics import paired_test

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

