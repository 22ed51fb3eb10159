"""The command line as a user runs it: ``jaxdet train`` with periodic eval and its output going
to a file, as a batch job or ``nohup`` runs it (no progress-bar redraws, a "compiling" line
before the first step, one plain line every train.log_every steps and one per evaluation); then
eval from the workdir (beside training's evaluation, not over it), then the same train command
on the finished run."""

import json
import os
import subprocess
import sys

import pytest

from jaxdet.cli.main import main

pytestmark = pytest.mark.xdist_group("e2e")


def test_cli_train_into_a_log_file_then_eval_from_workdir(tiny_overrides, tmp_path, capsys):
    """One ``jaxdet train`` process (its output in a file) makes the run the other commands
    read."""
    overrides = [*tiny_overrides, "train.log_every=2", "train.eval_every=3"]
    sets = [arg for item in overrides for arg in ("--set", item)]
    log_file = tmp_path / "train.log"
    run = tmp_path / "run"
    with open(log_file, "w") as out:
        subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "train", "--config",
                        "shapes_demo", "--workdir", str(run), *sets],
                       stdout=out, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    text = log_file.read_text()
    lines = text.splitlines()
    assert "\r" not in text and not any(line.startswith("train:") for line in lines)
    compiling = [i for i, line in enumerate(lines) if "compiling the train step" in line]
    steps = [line for line in lines if "jaxdet.train: step " in line and "/6" in line]
    assert compiling and compiling[0] < lines.index(steps[0])
    assert [line.split("step ")[1].split()[0] for line in steps] == ["2/6", "4/6", "6/6"]
    assert all("loss " in line and "lr " in line for line in steps)
    assert "img/s " in steps[-1] and "eta " in steps[-1]
    evals = [line for line in lines if "eval: detections of 10 images in" in line]
    assert len(evals) == 2  # after step 3 and at the end
    assert lines[-1].startswith("trained 6 steps (1-6)")
    # the dataset summary at start: both splits, with boxes per class
    assert "data.train: 24 images (" in text and "data.eval: 10 images (" in text
    assert "boxes per class: circle " in text
    # periodic eval inside the run: after step 3 and at the end (step 6)
    for step in (3, 6):
        metrics = json.loads((run / "eval" / f"step_{step}" / "metrics.json").read_text())
        assert set(metrics) >= {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10",
                                "AR100", "per_class_AP"}
        assert set(metrics["per_class_AP"]) == {"circle", "square", "triangle"}
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train_steps = [x["step"] for x in rows if "train/loss" in x["metrics"]]
    eval_steps = [x["step"] for x in rows if "eval/AP" in x["metrics"]]
    assert train_steps == [2, 4, 6] and eval_steps == [3, 6]
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "config.yaml").is_file()

    out = tmp_path / "again"
    assert main(["eval", "--workdir", str(run), "--out", str(out)]) == 0
    again = json.loads((out / "metrics.json").read_text())
    first = json.loads((run / "eval" / "step_6" / "metrics.json").read_text())
    assert again["AP"] == pytest.approx(first["AP"]) and again["AR100"] == pytest.approx(
        first["AR100"])

    # without --out: training's evaluation of step 6 is kept, the new one goes beside it
    eval_dir = run / "eval"
    kept = {p.name: p.stat().st_mtime_ns for p in (eval_dir / "step_6").iterdir()}
    assert main(["eval", "--workdir", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{eval_dir / 'step_6'} already holds an evaluation (kept)" in out
    assert (f"wrote {eval_dir / 'step_6_2' / 'detections.json'}, "
            f"{eval_dir / 'step_6_2' / 'metrics.json'} and "
            f"{eval_dir / 'step_6_2' / 'samples.png'}") in out
    assert {p.name: p.stat().st_mtime_ns for p in (eval_dir / "step_6").iterdir()} == kept
    assert json.loads((eval_dir / "step_6_2" / "metrics.json").read_text())["AP"] == (
        pytest.approx(first["AP"]))
    assert main(["eval", "--workdir", str(run), "--step", "3"]) == 0
    assert f"wrote {eval_dir / 'step_3_2' / 'detections.json'}" in capsys.readouterr().out
    assert main(["eval", "--workdir", str(run), "--overwrite"]) == 0
    assert f"wrote {eval_dir / 'step_6' / 'detections.json'}" in capsys.readouterr().out
    assert not (eval_dir / "step_6_3").exists()

    # the same train command again: complete, nothing retrained, re-evaluated or re-logged
    log_before = (run / "metrics.jsonl").read_text()
    evaluated = (eval_dir / "step_6" / "metrics.json").stat().st_mtime_ns
    assert main(["train", "--config", "shapes_demo", "--workdir", str(run), *sets]) == 0
    out = capsys.readouterr().out
    assert "is already complete at step 6; nothing trained" in out and "img/s" not in out
    assert (eval_dir / "step_6" / "metrics.json").stat().st_mtime_ns == evaluated
    assert (run / "metrics.jsonl").read_text() == log_before


def test_cli_config_typo_exits_2_naming_the_field(tmp_path, capsys):
    code = main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path),
                 "--set", "model.neck.dpeth=3"])
    err = capsys.readouterr().err
    assert code == 2
    assert "model.neck.dpeth" in err and "Did you mean: depth?" in err
    assert not (tmp_path / "checkpoints").exists()


def test_cli_lists_shipped_configs(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    for name in ("shapes_demo", "retinanet_resnet50_fpn_640", "ssd_mobilenet_v2_fpnlite_640"):
        assert name in out
