"""Faster R-CNN from its shipped demo config, end to end through the commands every family
uses: a short run on generated shapes whose loss goes down, periodic eval (COCO metrics, the
sample grid), ``jaxdet eval`` on the workdir, and ``jaxdet summary`` of the ResNet-50 zoo
config (parameters counted on an abstract model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

TINY_FASTER_RCNN = [
    "name=tiny_faster_rcnn", "model.first_stage_box_predictor_depth=32",
    "model.first_stage_max_proposals=32", "model.second_stage_batch_size=16",
    "model.initial_crop_size=8",
    "model.second_stage_post_processing.max_detections_per_class=10",
    "model.second_stage_post_processing.max_total_detections=10",
    "model.second_stage_post_processing.score_threshold=0.0",
    "data.resizer.height=64", "data.resizer.width=64",
    "data.train.num_images=32", "data.train.image_size=[64, 64]",
    "data.train.output_dir=data/train", "data.eval.num_images=8",
    "data.eval.image_size=[64, 80]", "data.eval.output_dir=data/eval",
    "data.max_number_of_boxes=8", "train.batch_size=4", "train.num_steps=40",
    "train.checkpoint_every=40", "train.eval_every=40", "train.log_every=1",
    "train.learning_rate.warmup_steps=1", "train.learning_rate.learning_rate_base=0.003",
    "eval.batch_size=4", "eval.num_visualizations=2", "parallel.data=1",
]


def test_faster_rcnn_trains_its_loss_down_and_evaluates(tmp_path):
    config = load_config("faster_rcnn_shapes_demo", TINY_FASTER_RCNN)
    workdir = tmp_path / "run"
    result = runs.train(config, workdir, progress=False)
    assert result.step == 40
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["metrics"]["train/loss"] for r in rows if "train/loss" in r["metrics"]]
    assert len(losses) == 40 and all(np.isfinite(losses))
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f"faster_rcnn e2e loss: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
    assert last < 0.8 * first
    out = workdir / "eval" / "step_40"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_images"] == 8 and "AP" in metrics and "per_class_AP" in metrics
    assert (out / "samples.png").is_file()
    detections = json.loads((out / "detections.json").read_text())
    assert detections and all(len(d["bbox"]) == 4 for d in detections)
    assert main(["eval", "--workdir", str(workdir), "--out", str(tmp_path / "ev")]) == 0
    assert "AP" in json.loads((tmp_path / "ev" / "metrics.json").read_text())


@pytest.mark.exhaustive  # 32 s; the C4 run above is the family's end-to-end run; FPN predicts
# through the same path in the export and mesh tests
def test_faster_rcnn_fpn_trains_its_loss_down_and_predicts(tmp_path):
    """The FPN variant (faster_rcnn_fpn_shapes_demo, shrunk): the loss goes down, the periodic
    eval scores COCO metrics, and ``jaxdet predict`` writes detections."""
    config = load_config("faster_rcnn_fpn_shapes_demo", [
        *TINY_FASTER_RCNN, "name=tiny_faster_rcnn_fpn", "model.neck.depth=16",
        "model.box_classifier_fc_depth=32"])
    workdir = tmp_path / "run"
    assert runs.train(config, workdir, progress=False).step == 40
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["metrics"]["train/loss"] for r in rows if "train/loss" in r["metrics"]]
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f"faster_rcnn fpn e2e loss: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
    assert all(np.isfinite(losses)) and last < 0.8 * first
    metrics = json.loads((workdir / "eval" / "step_40" / "metrics.json").read_text())
    assert metrics["num_images"] == 8 and "AP" in metrics
    images = sorted(p for p in workdir.rglob("*") if p.suffix in (".png", ".jpg")
                    and "eval" in p.parent.parts and "data" in p.parts)[:2]
    assert images
    out = tmp_path / "pred"
    assert main(["predict", "--workdir", str(workdir), "--out", str(out),
                 *map(str, images)]) == 0
    summary = json.loads((out / "predictions.json").read_text())
    assert summary["summary"].startswith("2 images, ")
    assert all((out / f"{image.stem}.json").is_file() for image in images)


def test_summary_counts_the_fpn_zoo_model(capsys):
    """faster_rcnn_resnet50_v1_fpn_640: TF's model of the same config has 42,485,943
    trainable parameters (tests/config/fixtures/tf_faster_rcnn_fpn_counts.json)."""
    assert main(["summary", "--config", "faster_rcnn_resnet50_v1_fpn_640", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    p = info["parameters"]
    assert info["variant"] == "FPN" and p["total"] == 42_485_943
    assert p["box_classifier"] == 7 * 7 * 256 * 1024 + 1024 + 2 * 1024 + 1024 * 1024 + 1024
    assert info["anchors"]["total"] == sum(6 * (640 // 2**lvl) ** 2 for lvl in range(2, 7))


def test_summary_counts_the_resnet50_zoo_model(capsys):
    assert main(["summary", "--config", "faster_rcnn_resnet50_v1_640", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    p = info["parameters"]
    print(f"faster_rcnn_resnet50_v1_640 parameters: {p}")
    assert info["type"] == "faster_rcnn" and info["anchors"]["total"] == 40 * 40 * 12
    # ResNet-50 without its classifier: 23,508,032 (BatchNorm scale and bias included)
    assert p["first_stage_features"] + p["box_classifier"] == 23_508_032
    assert p["rpn"] == 3 * 3 * 1024 * 512 + 512 + 512 * 12 * 6 + 12 * 6
    assert p["box_predictor"] == 2048 * 91 + 91 + 2048 * 4 + 4  # shared box
    assert p["total"] == sum(v for k, v in p.items() if k != "total")
    capsys.readouterr()
    assert main(["summary", "--config", "faster_rcnn_resnet50_v1_640"]) == 0
    assert "Faster R-CNN (C4)" in capsys.readouterr().out
