"""The benchmarks (``python -m benchmarks.<group>.<name>``, never run by the suite) still import:
a module moved in the package shows here, not on the day someone next measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in [*(ROOT / "benchmarks").glob("*/*.py"),
                              *(ROOT / "benchmarks").glob("*.py")] if p.name != "__init__.py")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.slow
def test_every_jaxdet_side_benchmark_imports():
    """Every script but the TF peer's (which need TensorFlow and the TF OD API), imported in
    one fresh process from the repository's root, as ``python -m`` would."""
    modules = [_module(p) for p in SCRIPTS if p.parent.name != "peers"]
    assert len(modules) > 20
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)"
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_benchmark_edits_the_import_path():
    """They import each other as a package (``benchmarks.common``), never through sys.path."""
    assert [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").rglob("*.py")
            if "sys.path" in p.read_text()] == []


def _cell_result(tf: list[float], jaxdet: list[float]) -> dict:
    """vs_tfod's result for one cell, seeds in order."""
    return {"runs": {"tf": [{"AP": a, "AP_by_jaxdet_eval": a + 0.001, "train_seconds": 600.0}
                            for a in tf],
                     "jaxdet": [{"AP": a, "train_seconds": 500.0} for a in jaxdet]}}


def test_learning_rate_sweep_verdicts():
    """A cell meets the target when jaxdet's mean AP is at least TF's minus the larger seed
    spread (one seed a side: minus the second-seed threshold); a side diverged at a base where
    its AP is under the bar while another base of the same dataset converged."""
    from benchmarks.accuracy import lr_sweep

    one_seed_close = lr_sweep.cell_summary("default:11", 0.02, [_cell_result([0.25], [0.23])], 0.03)
    assert one_seed_close["meets_target"] and one_seed_close["allowed_below_tf"] == 0.03
    # the issue's run: 0.268 against 0.089, then a second seed each: spread 0.02 and 0.01
    far = lr_sweep.cell_summary("default:11", 0.08, [_cell_result([0.268], [0.089]),
                                                     _cell_result([0.248], [0.099])], 0.03)
    assert far["tf_AP"] == [0.268, 0.248] and far["jaxdet_AP"] == [0.089, 0.099]
    assert far["tf_mean"] == 0.258 and far["jaxdet_mean"] == 0.094
    assert far["allowed_below_tf"] == 0.02 and not far["meets_target"]
    collapsed = lr_sweep.cell_summary("default:11", 0.16, [_cell_result([0.01], [0.02])], 0.03)
    cells = [one_seed_close, far, collapsed]
    lr_sweep.mark_divergence(cells, 0.05)
    assert [(c["tf_diverged"], c["jaxdet_diverged"]) for c in cells] == [
        (False, False), (False, False), (True, True)]
    rows = lr_sweep.table(cells).splitlines()
    assert rows[3] == "| default:11 | 0.08 | 0.268, 0.248 | 0.089, 0.099 | 0.269, 0.249 " \
                      "| -0.164 | no |"
    assert lr_sweep.cell_name("crowded:31", 0.04) == "crowded_seed31/base_0.04"


def test_suite_profile_summary_finds_the_tests_that_waited():
    """The suite profile's summary: busy time per worker, CPU against wall, and the tests that
    waited most (wall minus CPU) first; records written before CPU was timed are left out of
    the CPU figures."""
    from benchmarks.suite.profile import summarize

    def record(name: str, worker: str, start: float, call: float, cpu: float | None) -> dict:
        r = {"nodeid": f"tests/t.py::{name}", "worker": worker, "start": start,
             "end": start + call, "setup": 0.0, "call": call, "teardown": 0.0, "fixtures": {},
             "compiles": [0, 0.0], "cache_loads": [0, 0.0], "traces": 0.0, "programs": [],
             "subprocesses": []}
        return r if cpu is None else {**r, "cpu": cpu}

    summary = summarize([record("busy", "gw0", 0.0, 10.0, 9.5),
                         record("sleeps", "gw1", 0.0, 8.0, 1.0),
                         record("old", "gw1", 8.0, 4.0, None)])
    assert summary["wall_s"] == 12.0
    assert summary["workers"]["gw1"] == {"tests": 2, "busy_s": 12.0, "last_end_s": 12.0}
    assert summary["cpu_s"] == 10.5
    assert [w["test"] for w in summary["waited_most"]] == ["tests/t.py::sleeps",
                                                           "tests/t.py::busy"]
