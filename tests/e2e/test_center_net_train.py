"""CenterNet from a config, end to end through the same commands as the SSD family: train with
periodic eval (COCO metrics, sample grid), resume, ``jaxdet eval`` and ``jaxdet predict`` on the
workdir, ``jaxdet summary`` -- nothing outside ``tasks/center_net`` knows it is not an SSD."""

from __future__ import annotations

import json

import pytest

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

TINY_CENTER_NET = [
    "name=tiny_center_net", "model.neck.depth=16", "model.head_depth=16",
    "model.post_processing.max_detections=10", "model.post_processing.score_threshold=0.0",
    "data.resizer.height=64", "data.resizer.width=64",
    "data.train.num_images=16", "data.train.image_size=[64, 64]",
    "data.train.output_dir=data/train", "data.eval.num_images=8",
    "data.eval.image_size=[64, 80]", "data.eval.output_dir=data/eval",
    "data.max_number_of_boxes=8", "train.batch_size=4", "train.num_steps=4",
    "train.checkpoint_every=2", "train.eval_every=4", "train.log_every=1",
    "train.learning_rate.warmup_steps=1", "eval.batch_size=4", "eval.num_visualizations=2",
    "parallel.data=1",
]


def test_center_net_trains_evaluates_resumes_and_predicts(tmp_path, capsys):
    """Stopped after step 4 (its periodic evaluation done), then resumed to step 6: one train
    step program for both runs."""
    config = load_config("centernet_shapes_demo", [*TINY_CENTER_NET, "train.num_steps=6"])
    workdir = tmp_path / "run"
    result = runs.train(config, workdir, stop_after=4, progress=False)
    assert result.step == 4
    metrics = json.loads((workdir / "eval" / "step_4" / "metrics.json").read_text())
    assert metrics["num_images"] == 8 and "AP" in metrics and "per_class_AP" in metrics
    assert (workdir / "eval" / "step_4" / "samples.png").is_file()
    detections = json.loads((workdir / "eval" / "step_4" / "detections.json").read_text())
    assert detections and all(len(d["bbox"]) == 4 for d in detections)

    assert runs.train(config, workdir, progress=False, evaluate=False).step == 6

    assert main(["eval", "--workdir", str(workdir), "--out", str(tmp_path / "ev")]) == 0
    again = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert again["step"] == 6 and "AP" in again
    images = workdir / "data" / "eval" / "images"
    assert main(["predict", "--workdir", str(workdir), str(images), "--out",
                 str(tmp_path / "pred")]) == 0
    summary = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert summary["images"] and len(summary["images"][0]["detections"]) == 10
    capsys.readouterr()
    assert main(["summary", "--config", "centernet_shapes_demo", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["type"] == "center_net" and info["outputs"]["heatmap"] == [32, 32, 3]


def test_keypoint_demo_trains_and_scores_draws_and_writes_keypoints(tmp_path):
    """The keypoint demo's config, tiny: the eval scores each keypoint task by COCO keypoint AP
    (its detections written for pycocotools), the sample grid and ``predict`` draw keypoints,
    and predictions.json gives each square 4 and each triangle 3 (x, y, score) keypoints."""
    overrides = [*TINY_CENTER_NET, "train.num_steps=2", "train.eval_every=2",
                 "data.train.output_dir=data/kp_train", "data.eval.output_dir=data/kp_eval"]
    config = load_config("centernet_keypoints_shapes_demo", overrides)
    workdir = tmp_path / "kp"
    assert runs.train(config, workdir, progress=False).step == 2
    out = workdir / "eval" / "step_2"
    metrics = json.loads((out / "metrics.json").read_text())
    for task in ("square_corners", "triangle_vertices"):
        assert 0.0 <= metrics[f"keypoints/{task}/AP"] <= 1.0
        rows = json.loads((out / f"keypoint_detections_{task}.json").read_text())
        k = 4 if task == "square_corners" else 3
        assert rows and all(len(r["keypoints"]) == 3 * k for r in rows)
    assert "keypoint_AP" in metrics and (out / "samples.png").is_file()
    images = workdir / "data" / "kp_eval" / "images"
    assert main(["predict", "--workdir", str(workdir), str(images), "--out",
                 str(tmp_path / "pred"), "--score-threshold", "0"]) == 0
    summary = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    classes = {c["name"]: c for c in summary["classes"]}
    assert classes["square"]["keypoints"] == ["top_left", "top_right", "bottom_right",
                                              "bottom_left"]
    assert "keypoints" not in classes["circle"]
    sizes = {"circle": None, "square": 12, "triangle": 9}
    for image in summary["images"]:
        for det in image["detections"]:
            want = sizes[det["class_name"]]
            assert (len(det["keypoints"]) if "keypoints" in det else None) == want
