"""Every script under ``benchmarks/`` still runs: ``--help`` parses its arguments after its imports, so a
script that imports a name the package no longer has, or a dependency that is not installed, fails here
rather than when someone wants its numbers again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10 and not (ROOT / "benchmarks" / "rerank_fusion.py").exists()  # now `report fusion`


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_each_benchmark_prints_its_help(script: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    res = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("usage:"), res.stdout[:500]
