"""The command line as a user runs it: train with periodic eval, then eval from the workdir
(beside training's evaluation, not over it), then the same train command on the finished run."""

import json
import logging

import pytest

from jaxdet.cli.main import main

pytestmark = pytest.mark.xdist_group("e2e")


def test_cli_train_with_periodic_eval_then_eval_from_workdir(tiny_overrides, tmp_path, capsys,
                                                            caplog):
    sets = [arg for item in tiny_overrides + ["train.eval_every=3"] for arg in ("--set", item)]
    with caplog.at_level(logging.INFO, logger="jaxdet"):
        assert main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path), *sets]) == 0
    assert "trained 6 steps (1-6)" in capsys.readouterr().out
    # the dataset summary at start: both splits, with boxes per class
    assert "data.train: 24 images (" in caplog.text and "data.eval: 10 images (" in caplog.text
    assert "boxes per class: circle " in caplog.text
    # periodic eval inside the run: after step 3 and at the end (step 6)
    for step in (3, 6):
        metrics = json.loads((tmp_path / "eval" / f"step_{step}" / "metrics.json").read_text())
        assert set(metrics) >= {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10",
                                "AR100", "per_class_AP"}
        assert set(metrics["per_class_AP"]) == {"circle", "square", "triangle"}
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_steps = [x["step"] for x in lines if "train/loss" in x["metrics"]]
    eval_steps = [x["step"] for x in lines if "eval/AP" in x["metrics"]]
    assert train_steps == [1, 2, 3, 4, 5, 6] and eval_steps == [3, 6]
    assert any((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert (tmp_path / "config.yaml").is_file()

    out = tmp_path / "again"
    assert main(["eval", "--workdir", str(tmp_path), "--out", str(out)]) == 0
    again = json.loads((out / "metrics.json").read_text())
    first = json.loads((tmp_path / "eval" / "step_6" / "metrics.json").read_text())
    assert again["AP"] == pytest.approx(first["AP"]) and again["AR100"] == pytest.approx(
        first["AR100"])

    # without --out: training's evaluation of step 6 is kept, the new one goes beside it
    eval_dir = tmp_path / "eval"
    kept = {p.name: p.stat().st_mtime_ns for p in (eval_dir / "step_6").iterdir()}
    assert main(["eval", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{eval_dir / 'step_6'} already holds an evaluation (kept)" in out
    assert (f"wrote {eval_dir / 'step_6_2' / 'detections.json'}, "
            f"{eval_dir / 'step_6_2' / 'metrics.json'} and "
            f"{eval_dir / 'step_6_2' / 'samples.png'}") in out
    assert {p.name: p.stat().st_mtime_ns for p in (eval_dir / "step_6").iterdir()} == kept
    assert json.loads((eval_dir / "step_6_2" / "metrics.json").read_text())["AP"] == (
        pytest.approx(first["AP"]))
    assert main(["eval", "--workdir", str(tmp_path), "--step", "3"]) == 0
    assert f"wrote {eval_dir / 'step_3_2' / 'detections.json'}" in capsys.readouterr().out
    assert main(["eval", "--workdir", str(tmp_path), "--overwrite"]) == 0
    assert f"wrote {eval_dir / 'step_6' / 'detections.json'}" in capsys.readouterr().out
    assert not (eval_dir / "step_6_3").exists()

    # the same train command again: complete, nothing retrained, re-evaluated or re-logged
    log_before = (tmp_path / "metrics.jsonl").read_text()
    evaluated = (eval_dir / "step_6" / "metrics.json").stat().st_mtime_ns
    assert main(["train", "--config", "shapes_demo", "--workdir", str(tmp_path), *sets]) == 0
    out = capsys.readouterr().out
    assert "is already complete at step 6; nothing trained" in out and "img/s" not in out
    assert (eval_dir / "step_6" / "metrics.json").stat().st_mtime_ns == evaluated
    assert (tmp_path / "metrics.jsonl").read_text() == log_before


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
