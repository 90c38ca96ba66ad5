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


def test_settings_walk_records_whole_configs_below_its_root() -> None:
    """The walk counts the calls given the whole config (by name, ``*args`` or ``**kwargs``) while its root
    runs, not those given one group of it nor those outside the root; a call from a lower layer into a
    higher one is a climb."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import settings_walk
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from autofocus.config import AutofocusConfig
    from autofocus.program.steps.grounded_strand import StrandSettings
    from autofocus.program.steps.vss import grounded_slots

    cfg = AutofocusConfig()

    def takes(*args: object, **kwargs: object) -> None:
        pass

    def root() -> None:
        StrandSettings.of(cfg)
        takes(config=cfg)
        takes(cfg.merge)
        grounded_slots(cfg.merge.alpha, cfg.merge.k)

    walk = settings_walk.Walk(root.__code__)
    with walk.recording():
        takes(cfg)  # outside the root: not counted
        root()
    assert dict(walk.entered) == {"autofocus.program.steps.grounded_strand": 1, __name__: 1}
    walk.calls[("autofocus.config", "autofocus.program.steps.vss", "f")] += 1
    walk.calls[("autofocus.program.steps.vss", "autofocus.config", "g")] += 1
    assert walk.climbs() == [("autofocus.config", "autofocus.program.steps.vss", "f", 1)]
