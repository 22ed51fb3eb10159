"""The GPU check's dry run (``python -m benchmarks.gpu_check --platform cpu``), run as a user
runs it: a tiny stand-in of a model trained fed by its loader from a TFRecord of real photos
and from a fixed batch, by turns in worker processes, its start-up, memory and profile in the
JSON it prints and writes; the torchvision peer measured when torch is installed, reported
skipped otherwise. Every model's stand-in runs under ``-m exhaustive``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(tmp_path: Path, *models: str) -> dict:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--platform", "cpu",
                           "--models", *models, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)
    assert json.loads(out.read_text()) == printed
    return printed


def _check_model(model: dict) -> None:
    jaxdet = model["jaxdet"]
    assert jaxdet["fixed_images_per_second"] > 0 and jaxdet["loader_images_per_second"] > 0
    assert jaxdet["loader_over_fixed"] == pytest.approx(
        jaxdet["loader_images_per_second"] / jaxdet["fixed_images_per_second"], abs=2e-3)
    startup = jaxdet["startup"]
    assert startup["state_init_programs"] == 1  # the train state: one jitted program
    assert 0 < startup["model_build_s"] < startup["until_compiled_s"]
    assert 0 < startup["loader_first_batch_s"] <= startup["every_worker_ready_s"] + 1e-3
    assert jaxdet["loader_workers"] == 1
    ops = model["profile"]["top_ops"]
    assert ops and all(0 < op["share"] <= 1 for op in ops)
    assert sum(op["share"] for op in ops) <= 1.0 + 1e-6
    assert not any(op["name"].startswith("ThunkExecutor") for op in ops)


@pytest.mark.slow
def test_the_dry_run_measures_a_model_and_its_peer(tmp_path):
    result = _dry_run(tmp_path, "retinanet_r50_fpn_640")
    model = result["models"]["retinanet_r50_fpn_640"]
    assert model["config"] == "shapes_demo" and model["batch_size"] == 2
    _check_model(model)
    peer = model["torchvision"]["retinanet_resnet50_fpn"]
    try:
        import torchvision  # noqa: F401
    except ImportError:
        assert peer == {"skipped": peer["skipped"]} and "not installed" in peer["skipped"]
    else:
        assert peer["images_per_second"] > 0
        assert peer["jaxdet_over_torchvision"] == pytest.approx(
            model["jaxdet"]["fixed_images_per_second"] / peer["images_per_second"], rel=0.01)
    bar = result["targets"]["retinanet_r50_fpn_640: loader / fixed >= 0.95"]
    assert bar["met"] == (bar["figure"] >= 0.95)


@pytest.mark.exhaustive
def test_the_dry_run_of_every_model(tmp_path):
    result = _dry_run(tmp_path, "ssd_mobilenet_v2_320", "efficientdet_d0_512",
                      "faster_rcnn_r50_fpn_640")
    for model in result["models"].values():
        _check_model(model)
    assert "efficientdet_d0_512: >= 1200 img/s" in result["targets"]


class _TimedWorker:
    """A contender that answers the driver as a worker process does, each timed run taking
    the seconds given in turn."""

    def __init__(self, first: dict, seconds: list[float], closing: dict | None = None):
        self.first, self.seconds, self.closing = first, list(seconds), closing or {}

    def started(self) -> dict:
        return self.first

    def ask(self, command: dict) -> dict:
        if "start_loader" in command:
            return {"ready": {"loader_first_batch_s": 1.0}, "workers": 12}
        return {"seconds": self.seconds.pop(0)}

    def close(self) -> dict:
        return self.closing


def test_slow_contenders_keep_their_ratio_and_rates():
    """A CPU run's rates are below 1 img/s: the ratio comes from the medians, not from rates
    rounded first (0.156 and 0.199 img/s both read 0.2 once rounded to a tenth)."""
    from types import SimpleNamespace

    from benchmarks import gpu_check

    # batch 2, 3 steps a turn: jaxdet's fixed batch takes 38.4 s a turn (median), its loader
    # 40.0 s, torchvision 30.2 s; turns go fixed, loader, peer, round after round
    jaxdet = _TimedWorker({"compiled": {}, "device": "cpu"},
                          [38.0, 40.0, 38.4, 41.0, 39.0, 39.5])
    peer = _TimedWorker({"ready": {"first_step_s": 9.0}}, [30.2, 31.0, 29.5])
    args = SimpleNamespace(steps=3, rounds=3, profile_steps=0)
    model = gpu_check.measure_model({"batch_size": 2}, {"jaxdet": jaxdet,
                                                        "retinanet_resnet50_fpn": peer}, args)
    assert model["jaxdet"]["fixed_images_per_second"] == 0.156  # 6 / 38.4
    assert model["jaxdet"]["loader_images_per_second"] == 0.15  # 6 / 40.0
    figures = model["torchvision"]["retinanet_resnet50_fpn"]
    assert figures["images_per_second"] == 0.199  # 6 / 30.2
    assert figures["jaxdet_over_torchvision"] == 0.786  # 30.2 / 38.4
    assert model["jaxdet"]["loader_over_fixed"] == 0.96  # 38.4 / 40.0
