"""DeepMAC (CenterNet with a mask head) from its shipped demo config, end to end: a few train
steps on generated shapes with their exact masks (a finite mask loss over the boxes' masks),
the periodic eval writing COCO mask metrics (``segm/AP``) and ``mask_detections.json`` next to
the box metrics, and ``jaxdet predict`` writing each detection's mask as RLE."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxdet.cli.main import main
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs

# under -m exhaustive (57 s cold): make test keeps DeepMAC's train step, predict with masks
# (tasks/center_net/test_deepmac_task.py) and on a mesh, and Mask R-CNN's end-to-end run
# through mask evaluation and RLE predictions
pytestmark = [pytest.mark.slow, pytest.mark.exhaustive, pytest.mark.xdist_group("e2e")]

TINY_DEEPMAC = [
    "name=tiny_deepmac", "model.neck.depth=16", "model.head_depth=16",
    "model.mask_head.head_depth=16", "model.mask_head.num_init_channels=8",
    "model.mask_head.mask_size=8",
    "model.post_processing.max_detections=10", "model.post_processing.score_threshold=0.0",
    "data.resizer.height=64", "data.resizer.width=64",
    "data.train.num_images=16", "data.train.image_size=[64, 64]",
    "data.train.output_dir=data/train", "data.eval.num_images=8",
    "data.eval.image_size=[64, 80]", "data.eval.output_dir=data/eval",
    "data.max_number_of_boxes=8", "train.batch_size=4", "train.num_steps=4",
    "train.checkpoint_every=4", "train.eval_every=4", "train.log_every=1",
    "train.learning_rate.warmup_steps=1", "eval.batch_size=4", "eval.num_visualizations=2",
    "parallel.data=1",
]


def test_deepmac_trains_evaluates_masks_and_predicts_rle(tmp_path):
    config = load_config("centernet_deepmac_shapes_demo", TINY_DEEPMAC)
    workdir = tmp_path / "run"
    assert runs.train(config, workdir, progress=False).step == 4
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    mask = [r["metrics"]["train/mask_loss"] for r in rows if "train/mask_loss" in r["metrics"]]
    masks = [r["metrics"]["train/num_masks"] for r in rows if "train/num_masks" in r["metrics"]]
    assert len(mask) == 4 and all(np.isfinite(mask)) and all(v > 0 for v in mask)
    assert all(n >= 1 for n in masks)  # every generated image has shapes, each with a mask
    out = workdir / "eval" / "step_4"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_images"] == 8 and "AP" in metrics and "segm/AP" in metrics
    assert np.isfinite(metrics["segm/AP"]) and "mask_AP" in metrics
    detections = json.loads((out / "mask_detections.json").read_text())
    assert detections and all("segmentation" in d for d in detections)
    assert (out / "samples.png").is_file()

    images = workdir / "data" / "eval" / "images"
    assert main(["predict", "--workdir", str(workdir), str(images), "--out",
                 str(tmp_path / "pred"), "--score-threshold", "0"]) == 0
    summary = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    first = summary["images"][0]
    assert len(first["detections"]) == 10
    assert all(d["segmentation"]["size"] == [first["height"], first["width"]]
               and d["segmentation"]["counts"] for d in first["detections"])
