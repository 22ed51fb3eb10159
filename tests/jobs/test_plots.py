"""``jaxdet.jobs.plots``: reading metrics.jsonl, drawing curves.png, and the runs.train hook."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from jaxdet.jobs import plots, runs
from jaxdet.jobs.plots import (
    curves_are_current,
    plot_training_curves,
    read_metrics_jsonl,
    try_plot_training_curves,
)
from jaxdet.train.loop import LoopResult, TrainingDiverged

# A resumed run: steps 1-3 logged, killed, resumed from step 2, step 3 logged again (the last
# value wins), a NaN loss at step 4 written as null, eval at steps 2 and 4, and a line cut
# short by a kill.
LINES = [
    {"step": 1, "time": 0.0, "metrics": {"train/loss": 10.0, "train/classification_loss": 8.0,
                                         "train/localization_loss": 2.0,
                                         "train/learning_rate": 0.001}},
    {"step": 2, "time": 1.0, "metrics": {"train/loss": 4.0, "train/classification_loss": 3.0,
                                         "train/localization_loss": 1.0,
                                         "train/learning_rate": 0.002}},
    {"step": 2, "time": 1.5, "metrics": {"eval/AP": 0.1, "eval/AP50": 0.3, "eval/APl": -1.0}},
    {"step": 3, "time": 2.0, "metrics": {"train/loss": 3.0, "train/classification_loss": 2.5,
                                         "train/localization_loss": 0.5,
                                         "train/learning_rate": 0.003}},
    {"step": 3, "time": 9.0, "metrics": {"train/loss": 0.5, "train/classification_loss": 0.3,
                                         "train/localization_loss": 0.2,
                                         "train/learning_rate": 0.003}},
    {"step": 4, "time": 10.0, "metrics": {"train/loss": None, "train/classification_loss": None,
                                          "train/localization_loss": 0.1,
                                          "train/learning_rate": 0.002}},
    {"step": 4, "time": 11.0, "metrics": {"eval/AP": 0.25, "eval/AP50": 0.5, "eval/APl": -1.0}},
]


def _write(path, lines, tail: str = '{"step": 5, "time": 12.0, "metr'):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)
    return path


def test_read_metrics_jsonl(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        m = read_metrics_jsonl(_write(tmp_path / "metrics.jsonl", LINES))
    assert "skipped a line" in caplog.text  # the truncated last line
    assert set(m) == {"train/loss", "train/classification_loss", "train/localization_loss",
                      "train/learning_rate", "eval/AP", "eval/AP50", "eval/APl"}
    steps, values = m["train/loss"]
    assert steps.dtype == np.int64 and values.dtype == np.float64
    np.testing.assert_array_equal(steps, [1, 2, 3, 4])
    np.testing.assert_array_equal(values, [10.0, 4.0, 0.5, np.nan])  # step 3: last wins
    np.testing.assert_array_equal(m["train/localization_loss"][1], [2.0, 1.0, 0.2, 0.1])
    np.testing.assert_array_equal(m["train/learning_rate"][1], [0.001, 0.002, 0.003, 0.002])
    np.testing.assert_array_equal(m["eval/AP"][0], [2, 4])
    np.testing.assert_array_equal(m["eval/AP"][1], [0.1, 0.25])
    np.testing.assert_array_equal(m["eval/AP50"][1], [0.3, 0.5])


def test_read_sorts_steps_when_lines_are_out_of_order(tmp_path):
    lines = [{"step": s, "time": 0, "metrics": {"x": float(s)}} for s in (5, 1, 3)]
    steps, values = read_metrics_jsonl(_write(tmp_path / "m.jsonl", lines, tail=""))["x"]
    np.testing.assert_array_equal(steps, [1, 3, 5])
    np.testing.assert_array_equal(values, [1.0, 3.0, 5.0])


def _colours(png) -> set[tuple[int, ...]]:
    with Image.open(png) as image:
        assert image.format == "PNG"
        assert image.size == (1500, 420)
        assert image.mode == "RGBA"
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    return {tuple(int(c) for c in p) for p in np.unique(pixels, axis=0)}


TAB_BLUE, TAB_ORANGE, TAB_GREEN = (31, 119, 180), (255, 127, 14), (44, 160, 44)


def test_plot_training_curves_draws_every_panel(tmp_path):
    _write(tmp_path / "metrics.jsonl", LINES)
    out = plot_training_curves(tmp_path)
    assert out == tmp_path / "curves.png"
    colours = _colours(out)
    assert len(colours) > 20  # lines, text, anti-aliasing: not a blank canvas
    # matplotlib's default cycle: loss components / AP (blue, orange), the learning rate
    # (green), the total loss (black).
    assert {TAB_BLUE, TAB_ORANGE, TAB_GREEN, (0, 0, 0)} <= colours
    assert not list(tmp_path.glob(".curves.png*"))  # the temporary file was renamed


def test_plot_without_eval_or_lr(tmp_path):
    lines = [{"step": s, "time": 0, "metrics": {"train/loss": 1.0 / s}} for s in (1, 2, 3)]
    _write(tmp_path / "metrics.jsonl", lines, tail="")
    colours = _colours(plot_training_curves(tmp_path))
    assert (0, 0, 0) in colours and TAB_GREEN not in colours


def test_a_watchers_evaluations_join_the_runs_own(tmp_path):
    # the run evaluated step 2 (AP 0.1) and step 4 (AP 0.25); a watcher beside it evaluated
    # steps 3 and 4 (its step-4 value differs here only to show which one wins) and step 6
    _write(tmp_path / "metrics.jsonl", LINES)
    watched = [{"step": s, "time": 0, "metrics": {"eval/AP": ap, "eval/AP50": ap50}}
               for s, ap, ap50 in ((3, 0.2, 0.4), (4, 0.9, 0.9), (6, 0.35, 0.6))]
    watched.append({"step": 6, "time": 0, "metrics": {"other": 1.0}})  # not an eval/ series
    _write(tmp_path / "eval_watch" / "metrics.jsonl", watched, tail="")
    m = plots.read_training_metrics(tmp_path)
    np.testing.assert_array_equal(m["eval/AP"][0], [2, 3, 4, 6])
    np.testing.assert_array_equal(m["eval/AP"][1], [0.1, 0.2, 0.25, 0.35])  # the run's wins
    np.testing.assert_array_equal(m["eval/AP50"][1], [0.3, 0.4, 0.5, 0.6])
    assert "other" not in m
    np.testing.assert_array_equal(m["train/loss"][1], [10.0, 4.0, 0.5, np.nan])  # untouched


@pytest.mark.slow
def test_a_run_without_evaluations_shows_the_watchers(tmp_path):
    lines = [{"step": s, "time": 0, "metrics": {"train/loss": 1.0 / s}} for s in (1, 2, 3)]
    _write(tmp_path / "metrics.jsonl", lines, tail="")
    assert TAB_BLUE not in _colours(plot_training_curves(tmp_path))  # black loss, a note
    watched = [{"step": 3, "time": 0, "metrics": {"eval/AP": 0.3, "eval/AP50": 0.5}}]
    _write(tmp_path / "eval_watch" / "metrics.jsonl", watched, tail="")
    assert {TAB_BLUE, TAB_ORANGE} <= _colours(plot_training_curves(tmp_path))  # AP, AP50


def test_log_scale_only_when_the_loss_spans_a_decade():
    assert plots._spans_decades([np.array([10.0, 0.5]), np.array([np.nan, 0.2])])
    assert not plots._spans_decades([np.array([2.0, 0.5]), np.array([np.nan, 0.3])])
    assert not plots._spans_decades([np.array([10.0, 0.0])])  # zero cannot go on a log axis
    assert not plots._spans_decades([np.array([np.nan])])


def test_a_picture_newer_than_its_logs_is_left_as_it_is(tmp_path, monkeypatch):
    log = _write(tmp_path / "metrics.jsonl", LINES)
    assert not curves_are_current(tmp_path)  # no picture yet
    picture = try_plot_training_curves(tmp_path, unless_current=True)
    drawn = picture.stat().st_mtime_ns
    os.utime(log, ns=(drawn - 10**9, drawn - 10**9))
    assert curves_are_current(tmp_path)
    calls = []
    monkeypatch.setattr(plots, "plot_training_curves", calls.append)
    assert try_plot_training_curves(tmp_path, unless_current=True) == picture and calls == []
    try_plot_training_curves(tmp_path)  # without unless_current: always drawn
    assert calls == [tmp_path]
    # a log written at or after the drawing (the run's, or a watcher's) makes it stale
    watched = _write(tmp_path / "eval_watch" / "metrics.jsonl", LINES[2:3], tail="")
    os.utime(watched, ns=(drawn, drawn))
    assert not curves_are_current(tmp_path)
    os.utime(watched, ns=(drawn - 1, drawn - 1))
    os.utime(log, ns=(drawn + 1, drawn + 1))
    assert not curves_are_current(tmp_path)


def test_try_plot_warns_instead_of_raising(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        assert try_plot_training_curves(tmp_path / "missing") is None
    assert "could not draw" in caplog.text and "FileNotFoundError" in caplog.text


# --------------------------------------------------------------------------- runs.train hook

@pytest.fixture(scope="module")
def tiny(tiny_config):
    """The suite's tiny config (tests/conftest.py): 6 steps, evaluated at the end only; its
    programs are the ones other tests of it compile."""
    assert tiny_config.train.num_steps == 6 and tiny_config.train.eval_every == 0
    return tiny_config


@pytest.mark.slow
def test_train_leaves_curves_png(tiny, tmp_path):
    runs.train(tiny, tmp_path, progress=False)
    metrics = read_metrics_jsonl(tmp_path / "metrics.jsonl")
    np.testing.assert_array_equal(metrics["train/loss"][0], [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(metrics["eval/AP"][0], [6])
    colours = _colours(tmp_path / "curves.png")
    assert {TAB_BLUE, TAB_GREEN, (0, 0, 0)} <= colours


def _failing_loop(**kwargs) -> LoopResult:
    """Stands in for train_loop: logs two steps, then diverges."""
    for step, loss in ((1, 2.0), (2, 1.0)):
        kwargs["logger"].log(step, {"loss": loss, "classification_loss": loss / 2,
                                    "learning_rate": 0.01}, prefix="train")
    raise TrainingDiverged("loss is nan at step 3")


def test_curves_drawn_when_training_fails(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "train_loop", _failing_loop)
    with pytest.raises(TrainingDiverged, match="nan at step 3"):
        runs.train(tiny, tmp_path, progress=False, evaluate=False)
    assert len(_colours(tmp_path / "curves.png")) > 20


@pytest.mark.slow
def test_plotting_error_never_masks_the_training_error(tiny, tmp_path, monkeypatch, caplog):
    def broken(workdir):
        raise OSError("disk full")

    monkeypatch.setattr(runs, "train_loop", _failing_loop)
    monkeypatch.setattr(plots, "plot_training_curves", broken)
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        with pytest.raises(TrainingDiverged, match="nan at step 3"):
            runs.train(tiny, tmp_path, progress=False, evaluate=False)
    assert "could not draw" in caplog.text and "disk full" in caplog.text
    assert not (tmp_path / "curves.png").exists()
