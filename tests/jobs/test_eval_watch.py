"""Evaluation beside training (``jaxdet eval --watch``, ``jaxdet.watch_and_evaluate``): a
watcher started before the run evaluates its checkpoints as they are written and ends at its
last step; on a stopped run it ends after the timeout; on a finished run it evaluates the
newest checkpoint once, as ``jaxdet eval`` does; a checkpoint the run removes before it is
read is passed over; and no reader of a workdir removes the run's unfinished saves."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys

import pytest

import jaxdet
from jaxdet.cli.main import main
from jaxdet.jobs import plots, runs
from tensorboard_events import read_images

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

NO_EVAL = ["train.eval_every=1000"]


def _sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def _watch_rows(workdir) -> list[dict]:
    path = workdir / "eval_watch" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_watcher_started_first_follows_the_run_to_its_end(tiny_config, tmp_path):
    workdir = tmp_path / "run"
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(
        update={"checkpoint_every": 2, "eval_every": 1000})})
    watcher = subprocess.Popen(
        [sys.executable, "-m", "jaxdet.cli.main", "eval", "--watch", "--workdir", str(workdir),
         "--poll", "0.2", "--timeout", "240", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started: list[str] = []  # what the watcher says before the run starts
        while not any("waiting for a training run" in line for line in started):
            line = watcher.stderr.readline()
            assert line, "".join(started)  # the watcher ended without waiting
            started.append(line)
        runs.train(config, workdir, progress=False, evaluate=False)
        out, err = watcher.communicate(timeout=300)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    steps = [row["step"] for row in _watch_rows(workdir)]
    assert steps and steps == sorted(set(steps)) and set(steps) <= {2, 4, 6} and steps[-1] == 6
    assert f"evaluated {len(steps)} checkpoint(s): steps {', '.join(map(str, steps))}" in out
    final = json.loads((workdir / "eval" / "step_6" / "metrics.json").read_text())
    assert _watch_rows(workdir)[-1]["metrics"]["eval/AP"] == pytest.approx(final["AP"])
    assert not (workdir / "eval" / "step_6_2").exists()


def test_a_finished_run_is_evaluated_once_and_a_stopped_one_until_the_timeout(
        tiny_config, tiny_overrides, tmp_path, capsys):
    workdir = tmp_path / "run"
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(
        update={"eval_every": 1000})})
    runs.train(config, workdir, progress=False, evaluate=False, stop_after=3)
    # stopped at step 3 of 6: its checkpoint is evaluated, then nothing comes
    results = jaxdet.watch_and_evaluate(workdir, timeout=0.5, poll=0.1)
    assert [m["step"] for m in results] == [3]
    assert results[0]["out_dir"] == str(workdir / "eval" / "step_3")

    runs.train(config, workdir, progress=False, evaluate=False)  # resumed to its end
    (workdir / "curves.png").unlink(missing_ok=True)
    assert main(["eval", "--watch", "--workdir", str(workdir), "--poll", "0.1",
                 "--timeout", "60", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "step 6:" in printed and "evaluated 1 checkpoint(s): steps 6" in printed
    rows = _watch_rows(workdir)
    assert [row["step"] for row in rows] == [3, 6]
    # each evaluation's samples.png panels, beside its scalars (eval.num_visualizations: 8)
    pictures = read_images(workdir / "eval_watch" / "tensorboard")
    assert sorted(pictures) == sorted((f"eval_side_by_side_{k}", step)
                                      for step in (3, 6) for k in range(8))
    # the run evaluated nothing itself: its curves show the watcher's points, redrawn
    assert (workdir / "curves.png").is_file()
    steps, aps = plots.read_training_metrics(workdir)["eval/AP"]
    assert steps.tolist() == [3, 6]
    assert aps[1] == pytest.approx(rows[1]["metrics"]["eval/AP"])
    # the same numbers as evaluating that checkpoint on its own
    alone = runs.evaluate(config, workdir, step=6, out_dir=tmp_path / "alone", progress=False)
    watched = json.loads((workdir / "eval" / "step_6" / "metrics.json").read_text())
    assert watched["AP"] == pytest.approx(alone["AP"]) and watched["step"] == 6
    # a second watch finds it evaluated: nothing is done again
    assert main(["eval", "--watch", "--workdir", str(workdir), "--timeout", "60"]) == 0
    assert "evaluated 0 checkpoint(s)" in capsys.readouterr().out


def test_readers_leave_a_runs_unfinished_save_alone_and_a_removed_step_is_passed_over(
        tiny_config, tmp_path, monkeypatch, caplog):
    workdir = tmp_path / "run"
    runs.train(tiny_config, workdir, progress=False, evaluate=False)
    step_dir = workdir / "checkpoints" / "6"
    kept = tmp_path / "kept"
    shutil.copytree(step_dir, kept)

    def removed_meanwhile(*args, **kwargs):  # the run's keep_checkpoints rotated it out
        shutil.rmtree(step_dir)
        raise FileNotFoundError(step_dir / "state")

    with monkeypatch.context() as patch:
        patch.setattr(runs, "restore_inference_state", removed_meanwhile)
        with caplog.at_level(logging.INFO, logger="jaxdet"):
            assert jaxdet.watch_and_evaluate(workdir, timeout=0.5, poll=0.1) == []
    assert "step 6 was removed by the run" in caplog.text
    shutil.copytree(kept, step_dir)
    unfinished = workdir / "checkpoints" / "9.orbax-checkpoint-tmp-1234"
    unfinished.mkdir()
    (unfinished / "part").write_text("being written")
    assert main(["eval", "--workdir", str(workdir), "--no-progress"]) == 0
    jaxdet.load(workdir)
    assert (unfinished / "part").read_text() == "being written"


def test_watch_arguments_and_a_run_that_never_starts(tmp_path, capsys):
    assert main(["eval", "--watch", "--workdir", str(tmp_path), "--step", "3"]) == 2
    assert "--watch follows the checkpoints of a --workdir" in capsys.readouterr().err
    assert main(["eval", "--watch", "--workdir", str(tmp_path / "none"), "--timeout", "0.3",
                 "--poll", "0.1"]) == 1
    err = capsys.readouterr().err
    assert "no training run started in" in err and "within 0.3 s" in err
