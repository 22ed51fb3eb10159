"""Anchor sizes per level and ``jaxdet summary --data``: which ground-truth boxes no anchor
matches, on a hand-made COCO file whose best IoUs are computed by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from jaxdet.cli import main as cli
from jaxdet.config.loader import load_config
from jaxdet.data.coco import CocoSource
from jaxdet.data.stats import dataset_stats, format_dataset_stats
from jaxdet.tasks.ssd.anchor_fit import anchor_coverage, best_anchor_iou, level_anchor_sizes
from jaxdet.tasks.ssd.summary import format_summary, model_summary


def test_level_anchor_sizes_of_shapes_demo():
    """shapes_demo: anchor_scale 2, 2 scales per octave, ratios 1, 2, 0.5 on P3-P5: base size
    2 * 2**l px and 2**0.5 times that; ratios are w/h."""
    summary = model_summary(load_config("shapes_demo"), flops=False)
    levels = summary["anchors"]["levels"]
    for lvl, base in zip(levels, (16, 32, 64), strict=True):
        assert lvl["anchor_sizes_px"] == pytest.approx([base, round(base * 2 ** 0.5, 1)])
        assert lvl["aspect_ratios"] == [1.0, 2.0, 0.5]
    text = format_summary(summary)
    assert "sizes px" in text and "16, 22.6" in text and "64, 90.5" in text


def test_level_anchor_sizes_reads_the_first_location_of_each_level():
    anchors = np.array([[0, 0, 10, 10], [0, 0, 10, 40], [5, 5, 15, 15], [5, 5, 15, 45],
                        [0, 0, 20, 20]], np.float64)
    sizes = level_anchor_sizes(anchors, [4, 1], [2, 1])
    assert sizes[0] == {"sizes_px": [10.0, 20.0], "aspect_ratios": [1.0, 4.0],
                        "min_px": 10.0, "max_px": 20.0}
    assert sizes[1]["sizes_px"] == [20.0]


def test_best_anchor_iou_by_hand():
    anchors = np.array([[0, 0, 10, 10], [0, 0, 20, 20]], np.float32)
    boxes = np.array([[0, 0, 10, 10],     # equals anchor 0
                      [0, 0, 10, 20],     # 100/200 with either anchor
                      [30, 30, 40, 40],   # no overlap
                      [2, 2, 4, 4]], np.float32)  # inside anchor 0: 4 / 100
    np.testing.assert_allclose(best_anchor_iou(boxes, anchors), [1.0, 0.5, 0.0, 0.04],
                               atol=1e-6)
    # more boxes than one block: the same values in the same order
    many = np.tile(boxes, (200, 1))
    np.testing.assert_allclose(best_anchor_iou(many, anchors),
                               np.tile([1.0, 0.5, 0.0, 0.04], 200), atol=1e-6)


def test_coverage_counts_small_and_large_misses():
    anchors = np.array([[0, 0, 10, 10], [0, 0, 20, 20]], np.float32)
    boxes = np.array([[0, 0, 10, 10], [2, 2, 4, 4], [0, 0, 60, 60], [0, 0, 10, 20]])
    cov = anchor_coverage(boxes, anchors, 0.5)
    assert (cov["boxes"], cov["unmatched"], cov["smaller_than_anchors"],
            cov["larger_than_anchors"]) == (4, 2, 1, 1)
    assert cov["unmatched_size_px"] == [2.0, 60.0]
    sampled = anchor_coverage(np.tile(boxes, (10, 1)), anchors, 0.5, max_boxes=8)
    assert (sampled["boxes"], sampled["total_boxes"]) == (8, 40)


@pytest.fixture(scope="module")
def coco_dir(tmp_path_factory):
    """Two 256x256 images (the 128x128 shapes_demo input halves every box): a 32-px box that
    becomes a P3 anchor exactly, an 8-px box that becomes 4 px (best IoU 16/256), a crowd box,
    and an image without objects."""
    root = tmp_path_factory.mktemp("coco")
    (root / "images").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (256, 256), (90, 90, 90)).save(root / "images" / name)
    data = {
        "images": [{"id": 1, "file_name": "a.png", "height": 256, "width": 256},
                   {"id": 2, "file_name": "b.png", "height": 256, "width": 256}],
        "categories": [{"id": 7, "name": "duck"}, {"id": 9, "name": "boat"}],
        "annotations": [
            # pixel yxyx (8, 24, 40, 56) -> input (4, 12, 20, 28): P3 anchor at (12, 20), 16 px
            {"id": 1, "image_id": 1, "category_id": 7, "bbox": [24, 8, 32, 32], "iscrowd": 0},
            # (20, 20, 28, 28) -> (10, 10, 14, 14): 4x4 inside the 16-px anchor at (12, 12)
            {"id": 2, "image_id": 1, "category_id": 7, "bbox": [20, 20, 8, 8], "iscrowd": 0},
            {"id": 3, "image_id": 1, "category_id": 9, "bbox": [0, 0, 200, 200], "iscrowd": 1},
        ],
    }
    (root / "train.json").write_text(json.dumps(data))
    return root


def test_dataset_stats(coco_dir):
    stats = dataset_stats(CocoSource(coco_dir / "train.json", coco_dir / "images"))
    assert (stats.num_images, stats.images_without_objects, stats.num_boxes,
            stats.num_crowd) == (2, 1, 2, 1)
    assert stats.per_class == (2, 0) and stats.class_names == ("duck", "boat")
    np.testing.assert_allclose(stats.box_sizes, [32.0, 8.0])
    text = format_dataset_stats(stats, "data.train")
    assert text.splitlines()[0] == ("data.train: 2 images (1 without objects), 2 boxes + 1 crowd "
                                    "(ignored in training: data.crowd_boxes is ignore); box size "
                                    "sqrt(w*h) 8-32 px, median 20")
    assert "boxes per class: duck 2, boat 0" in text and "no boxes at all for: boat" in text


@pytest.mark.parametrize(("crowd_boxes", "split", "said"), [
    ("ignore", "train", "1 crowd (ignored in training: data.crowd_boxes is ignore)"),
    ("train", "train", "1 crowd (trained on as ordinary boxes: data.crowd_boxes is train)"),
    ("train", "eval", "1 crowd (not scored: evaluation ignores detections on them"),
])
def test_the_data_summary_says_what_happens_to_crowd_boxes(coco_dir, crowd_boxes, split, said):
    """The line a run logs for each split (the detectors' pipeline, from the config): a
    converted pipeline.config trains on crowd boxes (``data.crowd_boxes: train``) and says so;
    evaluation scores them by COCO's rules whatever the setting."""
    from jaxdet.tasks.detector import image_pipeline

    config = load_config("shapes_demo", ["model.num_classes=2",
                                         f"data.crowd_boxes={crowd_boxes}"])
    source = CocoSource(coco_dir / "train.json", coco_dir / "images")
    line = image_pipeline().describe(config, source, split).splitlines()[0]
    assert line.startswith(f"data.{split}: 2 images (1 without objects), 2 boxes + {said}")


def _coco_sets(coco_dir) -> list[str]:
    sets = ["model.num_classes=2", "data.train.type=coco",
            f"data.train.annotation_file={coco_dir / 'train.json'}",
            f"data.train.image_dir={coco_dir / 'images'}"]
    return [arg for item in sets for arg in ("--set", item)]


def test_summary_reports_boxes_no_anchor_matches(coco_dir, capsys):
    """On by default for a config that points at files: 1 of 2 boxes unmatched, 4 px."""
    assert cli.main(["summary", "--config", "shapes_demo", *_coco_sets(coco_dir), "--no-flops",
                     "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["data"]
    cov = fit["coverage"]
    assert (cov["boxes"], cov["unmatched"], cov["smaller_than_anchors"]) == (2, 1, 1)
    assert cov["unmatched_size_px"] == pytest.approx([4.0, 4.0])
    assert cov["median_best_iou"] == pytest.approx((1.0 + 16 / 256) / 2, abs=1e-6)
    assert fit["matcher"] == {"name": "argmax", "threshold": 0.5,
                              "force_match_for_each_row": True}
    assert fit["dataset"]["boxes_per_class"] == {"duck": 2, "boat": 0}

    assert cli.main(["summary", "--config", "shapes_demo", *_coco_sets(coco_dir),
                     "--no-flops"]) == 0
    text = capsys.readouterr().out
    assert "1 boxes (50.0%) have no anchor at that IoU; sizes 4 px at the input" in text
    assert "smaller than the smallest anchor: lower model.anchors.anchor_scale" in text
    assert cli.main(["summary", "--config", "shapes_demo", *_coco_sets(coco_dir), "--no-flops",
                     "--no-data"]) == 0
    assert "anchor coverage" not in capsys.readouterr().out


def test_summary_data_on_generated_shapes_only_when_asked(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sets = ["--set", "data.train.num_images=4", "--no-flops"]
    assert cli.main(["summary", "--config", "shapes_demo", *sets]) == 0
    assert "anchor coverage" not in capsys.readouterr().out
    assert cli.main(["summary", "--config", "shapes_demo", *sets, "--data"]) == 0
    out = capsys.readouterr().out
    assert "data.train: 4 images" in out and "anchor coverage at the input size" in out
    assert not list(tmp_path.iterdir())  # generated into a temporary folder, then removed


def test_unreadable_data_is_skipped_by_default_and_an_error_when_asked(capsys, tmp_path):
    sets = ["--set", "data.train.type=coco", "--set", f"data.train.annotation_file={tmp_path}/x",
            "--set", f"data.train.image_dir={tmp_path}", "--no-flops"]
    assert cli.main(["summary", "--config", "shapes_demo", *sets]) == 0
    assert "(dataset analysis skipped: COCO annotation file not found" in capsys.readouterr().out
    assert cli.main(["summary", "--config", "shapes_demo", *sets, "--data"]) == 1
    assert "COCO annotation file not found" in capsys.readouterr().err
