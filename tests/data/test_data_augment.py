"""Augment ops: image and boxes move together (a coloured block stays framed by its box)."""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxdet.data.augment import (
    Normalize,
    RandomColorJitter,
    RandomHorizontalFlip,
    RandomScaleCropAndPadToSquare,
    SSDRandomCrop,
    TrainCrowdBoxes,
)

SEEDS = range(12)
FIXTURES = Path(__file__).parent / "fixtures"


def test_horizontal_flip_moves_boxes_with_pixels(blocks):
    sample = blocks.sample()
    out = RandomHorizontalFlip(probability=1.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], sample["image"][:, ::-1])
    # block 0 spans x 20..50 of 80 -> 30..60 after the flip
    np.testing.assert_allclose(out["boxes"][0], [10 / 60, 30 / 80, 30 / 60, 60 / 80], atol=1e-6)
    blocks.assert_frame(out, tol=1e-3)
    np.testing.assert_array_equal(out["is_crowd"], sample["is_crowd"])


def test_horizontal_flip_probability_zero_is_identity(blocks):
    sample = blocks.sample()
    out = RandomHorizontalFlip(probability=0.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], sample["image"])
    np.testing.assert_array_equal(out["boxes"], sample["boxes"])


def test_horizontal_flip_is_random_and_seeded(blocks):
    op = RandomHorizontalFlip()
    flips = [op(blocks.sample(), np.random.default_rng(s))["boxes"][0, 1] != 20 / 80
             for s in range(40)]
    assert 5 < sum(flips) < 35
    a = op(blocks.sample(), np.random.default_rng(5))
    b = op(blocks.sample(), np.random.default_rng(5))
    np.testing.assert_array_equal(a["image"], b["image"])


@pytest.mark.parametrize("seed", SEEDS)
def test_scale_crop_and_pad_to_square(seed, blocks):
    op = RandomScaleCropAndPadToSquare(output_size=64, scale_min=0.5, scale_max=2.0)
    sample = blocks.sample()
    out = op(sample, np.random.default_rng(seed))
    assert out["image"].shape == (64, 64, 3) and out["image"].dtype == np.float32
    blocks.assert_frame(out, tol=1.01)
    info = out["image_info"]
    assert tuple(info[:2]) == (60, 80)
    # padding (bottom/right) is zero; the content extent holds the image
    ch, cw = int(info[2]), int(info[3])
    assert 0 < ch <= 64 and 0 < cw <= 64
    assert np.all(out["image"][ch:] == 0) and np.all(out["image"][:, cw:] == 0)
    # a block that is fully visible must not have been dropped
    for k in range(2):
        if k not in out["classes"]:
            found = blocks.find(out["image"], blocks.COLOURS[k])
            if found is not None:
                area = (found[2] - found[0]) * (found[3] - found[1])
                assert area <= 4 or found[0] <= 1 or found[1] <= 1 or found[2] >= ch - 1 \
                    or found[3] >= cw - 1


def test_scale_crop_and_pad_small_scale_pads(blocks):
    op = RandomScaleCropAndPadToSquare(output_size=64, scale_min=0.5, scale_max=0.5)
    out = op(blocks.sample(), np.random.default_rng(0))
    # longer side 80 -> 32, shorter 60 -> 24: nothing is cropped
    np.testing.assert_allclose(out["image_info"], [60, 80, 24, 32])
    np.testing.assert_allclose(out["boxes"][0], [10 / 60 * 24 / 64, 20 / 80 * 32 / 64,
                                                 30 / 60 * 24 / 64, 50 / 80 * 32 / 64], atol=1e-6)
    assert len(out["boxes"]) == 2


@pytest.mark.parametrize("seed", SEEDS)
def test_ssd_random_crop(seed, blocks):
    op = SSDRandomCrop(random_coef=0.0)
    sample = blocks.sample()
    out = op(sample, np.random.default_rng(seed))
    blocks.assert_frame(out, tol=1e-3)
    assert np.all(out["boxes"] >= 0) and np.all(out["boxes"] <= 1)
    # is_crowd travels with its box
    for cls, crowd in zip(out["classes"], out["is_crowd"], strict=True):
        assert crowd == sample["is_crowd"][cls]


def test_ssd_random_crop_keeps_what_tf_keeps(blocks):
    """TF keeps a box that overlaps the crop when the crop covers overlap_thresh of it, its
    centre inside or not (no SSD-paper centre rule); kept boxes are clipped to the crop."""
    op = SSDRandomCrop(min_object_covered=(0.0,), overlap_thresh=(0.3,), random_coef=0.0)
    centre_outside = 0
    for seed in range(60):
        sample = blocks.sample()
        out = op(sample, np.random.default_rng(seed))
        h, w = out["image"].shape[:2]
        for box, cls in zip(out["boxes"], out["classes"], strict=True):
            y0, x0, y1, x1 = sample["boxes"][cls] * [60, 80, 60, 80]
            bh, bw = (box[2] - box[0]) * h, (box[3] - box[1]) * w
            assert bh * bw >= 0.3 * (y1 - y0) * (x1 - x0) - 1e-3
            centre_outside += bh < (y1 - y0) / 2 - 1 or bw < (x1 - x0) / 2 - 1
    assert centre_outside > 0


def test_ssd_random_crop_draws_crops_as_tf_does():
    """jaxdet's SSDRandomCrop against TF's own ssd_random_crop (its seven default operations)
    on the same 200 cases, 50 draws each (fixtures/make_tf_ssd_random_crop_stats.py): the
    distributions of crop area, boxes kept and kept box sizes agree within sampling noise."""
    sys.path.insert(0, str(FIXTURES))
    from make_tf_ssd_random_crop_stats import DRAWS, cases, draw_sides, statistics

    tf = json.loads((FIXTURES / "tf_ssd_random_crop_stats.json").read_text())["tf"]
    op, rng, draws = SSDRandomCrop(), np.random.default_rng(0), []
    for case in cases():
        boxes = np.asarray(case["boxes"], np.float32)
        sample = {"image": np.zeros((case["height"], case["width"], 1), np.uint8),
                  "boxes": boxes, "classes": np.zeros(len(boxes), np.int32),
                  "is_crowd": np.zeros(len(boxes), bool)}
        for _ in range(DRAWS):
            out = op(sample, rng)
            h, w = out["image"].shape[:2]
            draws.append((h * w / (case["height"] * case["width"]), len(out["boxes"]),
                          draw_sides(out["boxes"])))
    ours = statistics(draws)
    np.testing.assert_allclose(ours["crop_area_quantiles"], tf["crop_area_quantiles"], atol=0.02)
    np.testing.assert_allclose(ours["box_side_quantiles"], tf["box_side_quantiles"], atol=0.02)
    for key, tol in (("crop_area_mean", 0.01), ("whole_image_share", 0.015),
                     ("no_box_share", 0.006), ("boxes_kept_mean", 0.05)):
        assert abs(ours[key] - tf[key]) <= tol, (key, ours[key], tf[key])


def test_train_crowd_boxes_makes_crowd_objects_ordinary(blocks):
    sample = blocks.sample()
    sample["is_crowd"] = np.array([True, False])
    out = TrainCrowdBoxes()(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(out["is_crowd"], [False, False])
    np.testing.assert_array_equal(sample["is_crowd"], [True, False])  # input untouched
    np.testing.assert_array_equal(out["boxes"], sample["boxes"])


def test_ssd_random_crop_random_coef_one_keeps_image(blocks):
    sample = blocks.sample()
    out = SSDRandomCrop(random_coef=1.0)(sample, np.random.default_rng(0))
    assert out is sample


def test_ssd_random_crop_min_object_covered(blocks):
    op = SSDRandomCrop(min_object_covered=(0.9,), overlap_thresh=(0.9,), random_coef=0.0,
                       area_range=(0.3, 1.0))
    for seed in range(10):
        sample = blocks.sample()
        out = op(sample, np.random.default_rng(seed))
        for box, cls in zip(out["boxes"], out["classes"], strict=True):
            h, w = out["image"].shape[:2]
            area = (box[2] - box[0]) * h * (box[3] - box[1]) * w
            y0, x0, y1, x1 = sample["boxes"][cls] * [60, 80, 60, 80]
            assert area >= 0.9 * (y1 - y0) * (x1 - x0) - 1e-3


def test_ssd_random_crop_without_boxes(blocks):
    sample = blocks.sample(rects=())
    out = SSDRandomCrop(random_coef=0.0)(sample, np.random.default_rng(1))
    assert out["boxes"].shape == (0, 4) and out["classes"].shape == (0,)
    assert out["image"].shape[0] <= 60 and out["image"].shape[1] <= 80


def test_color_jitter_keeps_boxes_range_and_uniform_blocks(blocks):
    op = RandomColorJitter(hue=0.1)
    for seed in range(8):
        sample = blocks.sample()
        out = op(sample, np.random.default_rng(seed))
        np.testing.assert_array_equal(out["boxes"], sample["boxes"])
        image = out["image"]
        assert image.shape == sample["image"].shape and image.dtype == np.float32
        assert image.min() >= 0 and image.max() <= 255
        block = image[10:30, 20:50].reshape(-1, 3)
        np.testing.assert_allclose(block, np.broadcast_to(block[0], block.shape), atol=1e-3)
    assert not np.allclose(out["image"], sample["image"])


def test_color_jitter_identity_settings(blocks):
    op = RandomColorJitter(brightness=0.0, contrast=(1.0, 1.0), saturation=(1.0, 1.0), hue=0.0)
    sample = blocks.sample()
    out = op(sample, np.random.default_rng(0))
    np.testing.assert_allclose(out["image"], sample["image"], atol=1e-3)
    off = RandomColorJitter(probability=0.0)(sample, np.random.default_rng(0))
    assert off is sample


def test_normalize(blocks):
    sample = blocks.sample()
    out = Normalize()(sample, np.random.default_rng(0))
    expected = (sample["image"] - np.array([123.675, 116.28, 103.53])) / np.array(
        [58.395, 57.12, 57.375])
    np.testing.assert_allclose(out["image"], expected, rtol=1e-5, atol=1e-5)
    assert out["image"].dtype == np.float32
    np.testing.assert_array_equal(out["boxes"], sample["boxes"])


def test_ops_do_not_modify_their_input(blocks):
    ops = [RandomHorizontalFlip(1.0), RandomScaleCropAndPadToSquare(48), SSDRandomCrop(
        random_coef=0.0), RandomColorJitter(), Normalize()]
    for op in ops:
        sample = blocks.sample()
        copy = {k: np.copy(v) for k, v in sample.items()}
        op(sample, np.random.default_rng(0))
        for k in copy:
            np.testing.assert_array_equal(sample[k], copy[k], err_msg=f"{op} changed {k}")


def test_ops_are_frozen_and_validate():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RandomHorizontalFlip().probability = 1.0
    with pytest.raises(ValueError, match="probability"):
        RandomHorizontalFlip(probability=1.5)
    with pytest.raises(ValueError, match="overlap_thresh"):
        SSDRandomCrop(min_object_covered=(0.1,), overlap_thresh=(0.1, 0.2))
    with pytest.raises(ValueError, match="scale"):
        RandomScaleCropAndPadToSquare(64, scale_min=2.0, scale_max=1.0)
