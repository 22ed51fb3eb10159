"""Keypoints move with image and boxes through every augment op, the resizers and padding;
a keypoint that leaves the image becomes unlabelled (v = 0, coordinates 0)."""

import numpy as np
import pytest

from jaxdet.data import augment_crop as crop
from jaxdet.data.augment import (
    RandomHorizontalFlip,
    RandomScaleCropAndPadToSquare,
    SSDRandomCrop,
)
from jaxdet.data.ground_truth import pad_ground_truth
from jaxdet.data.loader import build_sample
from jaxdet.data.records import make_record
from jaxdet.data.resize import KeepAspectRatioResizer

H, W = 60, 80
# one object per marker pixel: its box is 9x9 around the pixel, its keypoints are the pixel's
# centre (slot 0) and, unlabelled, slot 1
PIXELS = [(5, 7), (30, 40), (52, 70), (12, 66), (44, 9)]


def marker_sample() -> dict:
    """A 60x80 black image with one distinctly coloured pixel per object and keypoint 0 on
    that pixel's centre (normalized (y + 0.5) / H, (x + 0.5) / W)."""
    image = np.zeros((H, W, 3), np.float32)
    boxes, keypoints = [], []
    for i, (y, x) in enumerate(PIXELS):
        image[y, x] = (50.0 * (i + 1), 255.0, 10.0 * i)
        boxes.append([max(y - 4, 0) / H, max(x - 4, 0) / W, min(y + 5, H) / H,
                      min(x + 5, W) / W])
        keypoints.append([[(y + 0.5) / H, (x + 0.5) / W], [0.0, 0.0]])
    n = len(PIXELS)
    return {"image": image, "boxes": np.array(boxes, np.float32),
            "classes": np.zeros(n, np.int32), "is_crowd": np.zeros(n, bool),
            "keypoints": np.array(keypoints, np.float32),
            "keypoint_visibility": np.tile(np.array([[2, 0]], np.int32), (n, 1)),
            "image_id": 1, "image_info": np.array([H, W, H, W], np.float32)}


def marker_of(out: dict, kp: np.ndarray) -> np.ndarray:
    h, w = out["image"].shape[:2]
    return out["image"][int(kp[0] * h), int(kp[1] * w)]


def colour(i: int) -> np.ndarray:
    return np.array([50.0 * (i + 1), 255.0, 10.0 * i], np.float32)


def test_flip_mirrors_keypoints_and_swaps_slots():
    s = marker_sample()
    s["keypoint_visibility"][:, 1] = 1
    s["keypoints"][:, 1] = [0.25, 0.125]
    out = RandomHorizontalFlip(1.0, keypoint_flip_permutation=(1, 0))(
        s, np.random.default_rng(0))
    # slot 0 now holds the mirrored slot 1, and slot 1 the mirrored slot 0
    np.testing.assert_allclose(out["keypoints"][:, 0], np.tile([0.25, 0.875], (5, 1)))
    np.testing.assert_allclose(out["keypoints"][:, 1, 1], 1.0 - s["keypoints"][:, 0, 1])
    np.testing.assert_array_equal(out["keypoint_visibility"], s["keypoint_visibility"][:, ::-1])
    for i in range(len(PIXELS)):
        np.testing.assert_array_equal(marker_of(out, out["keypoints"][i, 1]), colour(i))
    np.testing.assert_array_equal(s["keypoints"][:, 1], np.tile([0.25, 0.125], (5, 1)))


def test_flip_refuses_a_permutation_of_the_wrong_length():
    op = RandomHorizontalFlip(1.0, keypoint_flip_permutation=(2, 1, 0))
    with pytest.raises(ValueError, match="3 entries but the samples have 2 keypoint slots"):
        op(marker_sample(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="not a permutation"):
        RandomHorizontalFlip(1.0, keypoint_flip_permutation=(0, 0))


OPS = [
    crop.RandomCropImage(random_coef=0.0, min_area=0.2, max_area=0.6),
    crop.RandomSquareCropByScale(max_border=16, scale_min=0.4, scale_max=0.9),
    crop.RandomAbsolutePadImage(40, 40),
    crop.RandomPadImage(),
    SSDRandomCrop(random_coef=0.0, min_object_covered=(0.0,), overlap_thresh=(0.0,)),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: type(op).__name__)
def test_crops_and_pads_keep_keypoints_on_their_pixels(op):
    seen_dropped = 0
    for seed in range(10):
        s = marker_sample()
        out = op(s, np.random.default_rng(seed))
        image = out["image"]
        assert out["keypoints"].shape[0] == out["boxes"].shape[0]
        for kp, v in zip(out["keypoints"], out["keypoint_visibility"], strict=True):
            assert v[1] == 0 and np.all(kp[1] == 0.0)
            if v[0] > 0:
                hits = [i for i in range(len(PIXELS))
                        if np.array_equal(marker_of(out, kp[0]), colour(i))]
                assert len(hits) == 1, (seed, kp[0])
            else:
                assert np.all(kp[0] == 0.0)
                seen_dropped += 1
        # every marker still in the picture is a labelled keypoint of a kept object
        visible = {i for i in range(len(PIXELS))
                   if np.any(np.all(image == colour(i), axis=-1))}
        labelled = {i for i in range(len(PIXELS)) for kp, v in
                    zip(out["keypoints"], out["keypoint_visibility"], strict=True)
                    if v[0] and np.array_equal(marker_of(out, kp[0]), colour(i))}
        assert labelled <= visible
    if isinstance(op, crop.RandomCropImage | crop.RandomSquareCropByScale):
        assert seen_dropped > 0  # some crops cut a keypoint off but kept its box


@pytest.mark.parametrize("op", [
    KeepAspectRatioResizer(min_dimension=100, max_dimension=120, pad_to_max_dimension=True),
    RandomScaleCropAndPadToSquare(output_size=64, scale_min=0.5, scale_max=1.5),
], ids=["keep_aspect_ratio", "scale_crop_pad"])
def test_resizing_ops_keep_keypoints_at_their_box_centres(op):
    for seed in range(6):
        s = marker_sample()
        s["boxes"] = np.array([[(y - 4) / H, (x - 4) / W, (y + 5) / H, (x + 5) / W]
                               for y, x in [(30, 40), (20, 20), (40, 60)]], np.float32)
        s["keypoints"] = s["keypoints"][:3].copy()
        s["keypoint_visibility"] = s["keypoint_visibility"][:3].copy()
        s["keypoints"][:, 0] = (s["boxes"][:, :2] + s["boxes"][:, 2:]) / 2
        for key in ("classes", "is_crowd"):
            s[key] = s[key][:3]
        out = op(s, np.random.default_rng(seed))
        b = out["boxes"]
        whole = (out["keypoint_visibility"][:, 0] > 0) & (b[:, 0] > 0) & (b[:, 1] > 0) & (
            b[:, 2] < 1) & (b[:, 3] < 1)
        centres = (b[:, :2] + b[:, 2:]) / 2
        np.testing.assert_allclose(out["keypoints"][whole, 0], centres[whole], atol=2e-2)


def test_record_to_padded_sample_carries_keypoints():
    record = make_record("x.png", 7, 40, 50, boxes=[[0, 0, 20, 25], [10, 10, 40, 50]],
                         classes=[0, 1], keypoints=[[[10, 5], [0, 0]], [[20, 30], [40, 50]]],
                         keypoint_visibility=[[2, 0], [1, 2]])
    sample = build_sample(record, np.zeros((40, 50, 3), np.uint8))
    np.testing.assert_allclose(sample["keypoints"],
                               [[[0.25, 0.1], [0, 0]], [[0.5, 0.6], [1.0, 1.0]]])
    padded = pad_ground_truth(sample, 4)
    assert padded["keypoints"].shape == (4, 2, 2)
    np.testing.assert_array_equal(padded["keypoint_visibility"],
                                  [[2, 0], [1, 2], [0, 0], [0, 0]])
    np.testing.assert_allclose(padded["keypoints"][:2], sample["keypoints"])
    cut = pad_ground_truth(sample, 1)
    np.testing.assert_array_equal(cut["keypoint_visibility"], [[2, 0]])
