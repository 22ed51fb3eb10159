"""TF OD API augment ops (data/augment_crop.py, data/augment_color.py): TF defaults, image and
boxes moving together, hand-computed cases, and every step of TF's shipped configs accepted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from jaxdet.config import schema as S
from jaxdet.data import augment_crop as crop
from jaxdet.data import build as data_build
from jaxdet.data.augment import _rgb_to_hsv
from jaxdet.data.augment_color import (
    RandomAdjustBrightness,
    RandomAdjustContrast,
    RandomAdjustHue,
    RandomAdjustSaturation,
    RandomBlackPatches,
    RandomDistortColor,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
)

TFOD_CONFIGS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod" / "configs"
SEEDS = range(40)
AUGMENT = TypeAdapter(S.AugmentConfig)


class FixedRng:
    """Stands in for np.random.Generator: ``integers`` returns the given values in order."""

    def __init__(self, *ints: int):
        self.ints = list(ints)

    def integers(self, lo, hi=None):
        value = self.ints.pop(0)
        assert (0 if hi is None else lo) <= value < (lo if hi is None else hi)
        return value


def _assert_objects_follow(sample, out):
    """Kept objects keep their own class and is_crowd (classes are 0..n-1 in blocks)."""
    assert len(out["boxes"]) == len(out["classes"]) == len(out["is_crowd"])
    np.testing.assert_array_equal(out["is_crowd"], sample["is_crowd"][out["classes"]])
    assert np.all(np.diff(out["classes"]) > 0)  # order kept, no duplicates


# --------------------------------------------------------------------------- defaults

TF_DEFAULTS = {
    "random_horizontal_flip": {"probability": 0.5, "keypoint_flip_permutation": ()},
    "random_crop_image": dict(min_object_covered=1.0, min_aspect_ratio=0.75,
                              max_aspect_ratio=1.33, min_area=0.1, max_area=1.0,
                              overlap_thresh=0.3, clip_boxes=True, random_coef=0.0),
    "random_adjust_brightness": {"max_delta": 0.2},
    "random_adjust_contrast": {"min_delta": 0.8, "max_delta": 1.25},
    "random_adjust_hue": {"max_delta": 0.02},
    "random_adjust_saturation": {"min_delta": 0.8, "max_delta": 1.25},
    "random_distort_color": {"color_ordering": 0},
    "random_square_crop_by_scale": dict(max_border=128, scale_min=0.6, scale_max=1.3,
                                        num_scales=8),
    "random_absolute_pad_image": dict(max_height_padding=1, max_width_padding=1, pad_color=()),
    "random_scale_crop_and_pad_to_square": dict(output_size=512, scale_min=0.1, scale_max=2.0),
    "ssd_random_crop": dict(min_object_covered=(0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
                            overlap_thresh=(0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0),
                            aspect_ratio_range=(0.5, 2.0), area_range=(0.1, 1.0),
                            random_coef=0.15),
    "random_pad_image": dict(min_image_height=None, min_image_width=None,
                             max_image_height=None, max_image_width=None, pad_color=()),
    "random_black_patches": dict(max_black_patches=10, probability=0.5,
                                 size_to_image_ratio=0.1),
}

OP_CLASSES = {
    "random_crop_image": crop.RandomCropImage,
    "random_adjust_brightness": RandomAdjustBrightness,
    "random_adjust_contrast": RandomAdjustContrast,
    "random_adjust_hue": RandomAdjustHue,
    "random_adjust_saturation": RandomAdjustSaturation,
    "random_distort_color": RandomDistortColor,
    "random_square_crop_by_scale": crop.RandomSquareCropByScale,
    "random_absolute_pad_image": crop.RandomAbsolutePadImage,
    "random_pad_image": crop.RandomPadImage,
    "random_black_patches": RandomBlackPatches,
}


@pytest.mark.parametrize("name", sorted(TF_DEFAULTS))
def test_schema_defaults_are_tfs(name):
    cfg = AUGMENT.validate_python({"name": name})
    assert cfg.model_dump(exclude={"name"}) == TF_DEFAULTS[name]


@pytest.mark.parametrize("name", sorted(OP_CLASSES))
def test_op_defaults_and_builder_match_schema(name):
    op_cls = OP_CLASSES[name]
    defaults = {f.name: f.default for f in dataclasses.fields(op_cls) if f.name in
                TF_DEFAULTS[name]}
    assert defaults == TF_DEFAULTS[name]
    built = data_build.build_augment_op(AUGMENT.validate_python({"name": name}), (64, 64))
    assert built == op_cls()


def test_builder_passes_fields():
    cfg = AUGMENT.validate_python({"name": "random_absolute_pad_image", "max_height_padding": 200,
                                   "max_width_padding": 100, "pad_color": [0, 0, 0]})
    op = data_build.build_augment_op(cfg, (64, 64))
    assert op == crop.RandomAbsolutePadImage(200, 100, (0.0, 0.0, 0.0))


def test_scale_crop_and_pad_output_size_must_match_resizer():
    cfg = AUGMENT.validate_python({"name": "random_scale_crop_and_pad_to_square",
                                   "output_size": 640})
    assert data_build.build_augment_op(cfg, (640, 640)).output_size == 640
    with pytest.raises(ValueError, match=r"output_size \(640\).*\(512\)"):
        data_build.build_augment_op(cfg, (512, 512))


@pytest.mark.parametrize("bad", [
    {"name": "random_crop_image", "min_area": 0.5, "max_area": 0.4},
    {"name": "random_crop_image", "min_aspect_ratio": 2.0, "max_aspect_ratio": 1.0},
    {"name": "random_adjust_contrast", "min_delta": 1.5},
    {"name": "random_adjust_saturation", "max_delta": -1.0},
    {"name": "random_distort_color", "color_ordering": 2},
    {"name": "random_pad_image", "min_image_height": 100},
    {"name": "random_pad_image", "pad_color": [1, 2]},
    {"name": "random_square_crop_by_scale", "scale_min": 2.0},
    {"name": "random_black_patches", "size_to_image_ratio": 0.0},
    {"name": "random_pad_image", "max_pad_frac": 0.5},
])
def test_schema_rejects_bad_fields(bad):
    with pytest.raises(ValidationError):
        AUGMENT.validate_python(bad)


@pytest.mark.parametrize("make, match", [
    (lambda: crop.RandomCropImage(min_area=0.5, max_area=0.2), "min_area"),
    (lambda: crop.RandomCropImage(overlap_thresh=1.5), "overlap_thresh"),
    (lambda: crop.RandomSquareCropByScale(max_border=0), "max_border"),
    (lambda: crop.RandomPadImage(max_image_height=10), "both set"),
    (lambda: crop.RandomAbsolutePadImage(pad_color=(1.0,)), "pad_color"),
    (lambda: RandomAdjustContrast(2.0, 1.0), "min_delta"),
    (lambda: RandomAdjustHue(1.5), "max_delta"),
    (lambda: RandomDistortColor(3), "color_ordering"),
    (lambda: RandomBlackPatches(probability=2.0), "probability"),
])
def test_ops_validate_parameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def _tfod_steps():
    from jaxdet.config.pbtxt import parse_pbtxt

    steps = []
    for path in sorted(TFOD_CONFIGS.glob("*.config")):
        train = parse_pbtxt(path.read_text()).take("train_config")
        for option in train.all("data_augmentation_options"):
            for name in option.names():
                fields = option.take(name).to_dict()
                fields.pop("keypoint_flip_permutation", None)  # keypoints: not supported
                steps.append((path.name, name, fields))
    return steps


@pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared/data/tfod/configs absent")
def test_every_tfod_config_augmentation_is_a_schema_op():
    steps = _tfod_steps()
    assert len({name for _, name, _ in steps}) >= 10
    for path, name, fields in steps:
        cfg = AUGMENT.validate_python({"name": name, **fields})
        op = data_build.build_augment_op(cfg, (cfg.output_size,) * 2 if name ==
                                       "random_scale_crop_and_pad_to_square" else (64, 64))
        for key, value in fields.items():  # every TF field reaches the op, unchanged
            got = getattr(op, key, getattr(cfg, key))
            np.testing.assert_allclose(got, value, rtol=1e-6, err_msg=f"{path}: {name}.{key}")


# --------------------------------------------------------------------------- random_crop_image


@pytest.mark.parametrize("overlap", [0.0, 0.3, 0.9])
def test_random_crop_image_moves_boxes_with_pixels(blocks, overlap):
    op = crop.RandomCropImage(min_object_covered=0.0, overlap_thresh=overlap, min_area=0.1)
    sample = blocks.sample()
    sizes = []
    for seed in SEEDS:
        out = op(sample, np.random.default_rng(seed))
        blocks.assert_frame(out, tol=1.01)
        _assert_objects_follow(sample, out)
        h, w = out["image"].shape[:2]
        sizes.append((h, w))
        assert tuple(out["image_info"]) == (60, 80, h, w)
        assert np.all((out["boxes"] >= 0) & (out["boxes"] <= 1))
        # a kept box has at least overlap_thresh of its block's area inside the crop
        for cls in out["classes"]:
            found = blocks.find(out["image"], blocks.COLOURS[cls])
            y0, x0, y1, x1 = ((10, 20, 30, 50), (35, 5, 55, 25))[cls]
            visible = (found[2] - found[0]) * (found[3] - found[1]) / ((y1 - y0) * (x1 - x0))
            assert visible >= overlap - 0.05
    areas = np.array([h * w for h, w in sizes]) / (60 * 80)
    aspects = np.array([w / h for h, w in sizes])
    assert np.all((areas >= 0.1 - 0.02) & (areas <= 1.0))
    assert np.all((aspects >= 0.75 - 0.05) & (aspects <= 1.33 + 0.05))
    assert len(set(sizes)) > 10


def test_random_crop_image_hand_computed(monkeypatch, blocks):
    """Crop rows 10..40, cols 20..60 of 60x80: block 0 (10..30, 20..50) maps to the crop's
    top-left; block 1 (35..55, 5..25) has 25 / 400 of its area inside."""
    monkeypatch.setattr(crop, "sample_distorted_bounding_box", lambda *a, **k: (10, 20, 40, 60))
    sample = blocks.sample()
    out = crop.RandomCropImage(overlap_thresh=0.3)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], sample["image"][10:40, 20:60])
    np.testing.assert_allclose(out["boxes"], [[0, 0, 20 / 30, 30 / 40]], atol=1e-6)
    np.testing.assert_array_equal(out["classes"], [0])
    np.testing.assert_array_equal(out["is_crowd"], [False])
    out = crop.RandomCropImage(overlap_thresh=0.05)(sample, np.random.default_rng(0))
    np.testing.assert_allclose(out["boxes"][1], [25 / 30, 0, 1, 5 / 40], atol=1e-6)
    np.testing.assert_array_equal(out["is_crowd"], [False, True])
    out = crop.RandomCropImage(overlap_thresh=0.05, clip_boxes=False)(
        sample, np.random.default_rng(0))
    np.testing.assert_allclose(out["boxes"][1], [25 / 30, -15 / 40, 45 / 30, 5 / 40], atol=1e-6)


def test_random_crop_image_min_object_covered_and_random_coef(blocks):
    sample = blocks.sample()
    op = crop.RandomCropImage(min_object_covered=1.0, overlap_thresh=0.9)
    for seed in SEEDS:
        out = op(sample, np.random.default_rng(seed))
        assert len(out["classes"]) >= 1  # the crop covers some block entirely
        blocks.assert_frame(out, tol=1.01)
    keep = crop.RandomCropImage(min_object_covered=0.0, random_coef=1.0)
    assert all(keep(sample, np.random.default_rng(s)) is sample for s in SEEDS)
    half = crop.RandomCropImage(min_object_covered=0.0, random_coef=0.5)
    kept = sum(half(sample, np.random.default_rng(s)) is sample for s in range(200))
    assert 70 < kept < 130


def test_sample_distorted_bounding_box_falls_back_to_whole_image():
    rng = np.random.default_rng(0)
    kwargs = dict(aspect_ratio_range=(0.75, 1.33), area_range=(0.1, 0.5), max_attempts=100,
                  rng=rng)
    # no boxes: the whole image is the object, a crop of at most half its area never covers it
    empty = np.zeros((0, 4), np.float32)
    assert crop.sample_distorted_bounding_box(60, 80, empty, min_object_covered=1.0,
                                              **kwargs) == (0, 0, 60, 80)
    # boxes under one pixel do not count
    tiny = np.array([[0.5, 0.5, 0.505, 0.505]], np.float32)
    assert crop.sample_distorted_bounding_box(60, 80, tiny, min_object_covered=0.0,
                                              **kwargs) == (0, 0, 60, 80)
    y0, x0, y1, x1 = crop.sample_distorted_bounding_box(60, 80, empty, min_object_covered=0.0,
                                                        **kwargs)
    assert 0.1 * 4800 <= (y1 - y0) * (x1 - x0) <= 0.5 * 4800 and y1 <= 60 and x1 <= 80


# --------------------------------------------------------------------------- square crop


def test_crop_border_hand_computed():
    # least k with 128 / 2**k < size / 2
    assert crop.crop_border(128, 60) == 16
    assert crop.crop_border(128, 80) == 32
    assert crop.crop_border(128, 255) == 64
    assert crop.crop_border(128, 256) == 128
    assert crop.crop_border(128, 1000) == 128
    assert crop.crop_border(128, 1) == 1


def test_random_square_crop_by_scale_hand_computed(blocks):
    """60x80, scale 1: an 80 px square centred at (30, 40) starts at row -10, col 0."""
    sample = blocks.sample()
    op = crop.RandomSquareCropByScale(scale_min=1.0, scale_max=1.0, num_scales=1)
    out = op(sample, FixedRng(0, 30, 40))
    assert out["image"].shape == (80, 80, 3)
    # TF copies rows 0..58 and cols 0..78 (never the last row / column)
    np.testing.assert_array_equal(out["image"][10:69, :79], sample["image"][:59, :79])
    assert np.all(out["image"][:10] == 0) and np.all(out["image"][69:] == 0)
    assert np.all(out["image"][:, 79] == 0)
    np.testing.assert_allclose(out["boxes"], [[20 / 80, 20 / 80, 40 / 80, 50 / 80],
                                              [45 / 80, 5 / 80, 65 / 80, 25 / 80]], atol=1e-6)
    assert tuple(out["image_info"]) == (60, 80, 80, 80)
    # a 0.3 * 80 = 24 px square centred at (16, 44) spans rows 4..28, cols 32..56:
    # block 1 (35..55, 5..25) is outside, block 0 (10..30, 20..50) is clipped
    op = crop.RandomSquareCropByScale(scale_min=0.3, scale_max=0.3, num_scales=1)
    out = op(sample, FixedRng(0, 16, 44))
    np.testing.assert_array_equal(out["image"], sample["image"][4:28, 32:56])
    np.testing.assert_array_equal(out["classes"], [0])
    np.testing.assert_allclose(out["boxes"], [[6 / 24, 0, 1, 18 / 24]], atol=1e-6)


def test_random_square_crop_by_scale_moves_boxes_with_pixels(blocks):
    op = crop.RandomSquareCropByScale(scale_min=0.3, scale_max=1.3, num_scales=6)
    sample = blocks.sample()
    allowed = {int(s * np.float32(80)) for s in np.linspace(0.3, 1.3, 6, dtype=np.float32)}
    seen = set()
    for seed in SEEDS:
        out = op(sample, np.random.default_rng(seed))
        size = out["image"].shape[0]
        assert out["image"].shape == (size, size, 3) and size in allowed
        seen.add(size)
        blocks.assert_frame(out, tol=1.01)
        _assert_objects_follow(sample, out)
        assert np.all((out["boxes"] >= 0) & (out["boxes"] <= 1))
    assert len(seen) >= 4


# --------------------------------------------------------------------------- pads


def test_random_pad_image_defaults(blocks):
    sample = blocks.sample()
    mean = sample["image"].mean(axis=(0, 1))
    sizes = set()
    for seed in SEEDS:
        out = crop.RandomPadImage()(sample, np.random.default_rng(seed))
        h, w = out["image"].shape[:2]
        assert 60 <= h < 120 and 80 <= w < 160
        sizes.add((h, w))
        blocks.assert_frame(out, tol=1e-3)
        np.testing.assert_array_equal(out["classes"], sample["classes"])
        # the pad is the image's mean colour, and the image is all there
        found = blocks.find(out["image"], blocks.COLOURS[0])
        oy, ox = int(found[0]) - 10, int(found[1]) - 20
        np.testing.assert_array_equal(out["image"][oy:oy + 60, ox:ox + 80], sample["image"])
        assert oy + 60 <= h and ox + 80 <= w
        pad = np.ones((h, w), bool)
        pad[oy:oy + 60, ox:ox + 80] = False
        np.testing.assert_allclose(out["image"][pad], np.broadcast_to(mean, (pad.sum(), 3)),
                                   rtol=1e-5)
    assert len(sizes) > 20


def test_random_pad_image_hand_computed(blocks):
    """min = max = 70 x 90: exactly that size; offsets below 10; pad colour as given."""
    sample = blocks.sample()
    op = crop.RandomPadImage(70, 90, 70, 90, pad_color=(0.0, 0.0, 255.0))
    out = op(sample, FixedRng(3, 7))
    assert out["image"].shape == (70, 90, 3)
    np.testing.assert_array_equal(out["image"][3:63, 7:87], sample["image"])
    np.testing.assert_array_equal(out["image"][0, 0], [0, 0, 255])
    np.testing.assert_allclose(out["boxes"][0], [13 / 70, 27 / 90, 33 / 70, 57 / 90], atol=1e-6)
    assert tuple(out["image_info"]) == (60, 80, 70, 90)


def test_random_absolute_pad_image(blocks):
    sample = blocks.sample()
    same = crop.RandomAbsolutePadImage()(sample, np.random.default_rng(0))  # pad in [0, 1)
    np.testing.assert_array_equal(same["image"], sample["image"])
    np.testing.assert_allclose(same["boxes"], sample["boxes"], atol=1e-6)
    op = crop.RandomAbsolutePadImage(200, 100, pad_color=(0.0, 0.0, 0.0))
    extra = []
    for seed in SEEDS:
        out = op(sample, np.random.default_rng(seed))
        h, w = out["image"].shape[:2]
        assert 60 <= h < 260 and 80 <= w < 180
        extra.append((h - 60, w - 80))
        blocks.assert_frame(out, tol=1e-3)
        assert out["image"].min() == 0.0 or (h, w) == (60, 80)
    assert np.mean(extra, axis=0)[0] > np.mean(extra, axis=0)[1]


# --------------------------------------------------------------------------- colour


def _flat(colour, shape=(4, 5)) -> dict:
    image = np.broadcast_to(np.asarray(colour, np.float32), (*shape, 3)).copy()
    return {"image": image, "boxes": np.array([[0.1, 0.1, 0.5, 0.5]], np.float32),
            "classes": np.array([1], np.int32), "is_crowd": np.array([False])}


def test_brightness_hand_computed_and_bounds():
    sample = _flat((100.0, 50.0, 250.0))
    for seed in SEEDS:
        out = RandomAdjustBrightness()(sample, np.random.default_rng(seed))
        delta = 255.0 * np.random.default_rng(seed).uniform(-0.2, 0.2)
        np.testing.assert_allclose(out["image"][0, 0], np.clip([100 + delta, 50 + delta,
                                                                250 + delta], 0, 255),
                                   atol=1e-3)
        assert abs(out["image"][0, 0, 0] - 100) <= 0.2 * 255 + 1e-3
        np.testing.assert_array_equal(out["boxes"], sample["boxes"])
    assert sample["image"][0, 0, 0] == 100.0  # input untouched


def test_contrast_two_pixel_image():
    image = np.array([[[10, 100, 0], [30, 200, 255]]], np.float32)  # means 20, 150, 127.5
    np.testing.assert_allclose(adjust_contrast(image, 1.5),
                               [[[5, 75, 0], [35, 225, 255]]], atol=1e-4)
    np.testing.assert_allclose(adjust_contrast(image, 0.5),
                               [[[15, 125, 63.75], [25, 175, 191.25]]], atol=1e-4)
    sample = {"image": image}
    for seed in SEEDS:
        out = RandomAdjustContrast()(sample, np.random.default_rng(seed))["image"]
        factor = (out[0, 1, 0] - out[0, 0, 0]) / 20.0
        assert 0.8 - 1e-5 <= factor <= 1.25 + 1e-5
        np.testing.assert_allclose(factor, np.random.default_rng(seed).uniform(0.8, 1.25),
                                   atol=1e-5)


def test_hue_exact_for_pure_colours():
    red = _flat((255.0, 0.0, 0.0))["image"]
    np.testing.assert_allclose(adjust_hue(red, 1 / 3)[0, 0], [0, 255, 0], atol=1e-3)
    np.testing.assert_allclose(adjust_hue(red, -1 / 3)[0, 0], [0, 0, 255], atol=1e-3)
    np.testing.assert_allclose(adjust_hue(red, 1 / 12)[0, 0], [255, 127.5, 0], atol=1e-3)
    grey = _flat((90.0, 90.0, 90.0))["image"]
    np.testing.assert_allclose(adjust_hue(grey, 0.3), grey, atol=1e-4)
    signs = set()
    for seed in SEEDS:
        out = RandomAdjustHue()(_flat((255.0, 0.0, 0.0)), np.random.default_rng(seed))["image"]
        h, s, v = _rgb_to_hsv(*[out[..., c] for c in range(3)])
        shift = (float(h[0, 0]) + 0.5) % 1.0 - 0.5
        np.testing.assert_allclose(shift, np.random.default_rng(seed).uniform(-0.02, 0.02),
                                   atol=1e-5)
        signs.add(shift > 0)
        np.testing.assert_allclose([s[0, 0], v[0, 0]], [1.0, 255.0], atol=1e-4)
    assert signs == {True, False}


def test_saturation_hand_computed():
    image = _flat((200.0, 100.0, 100.0))["image"]  # h 0, s 0.5, v 200
    np.testing.assert_allclose(adjust_saturation(image, 1.5)[0, 0], [200, 50, 50], atol=1e-3)
    np.testing.assert_allclose(adjust_saturation(image, 0.8)[0, 0], [200, 120, 120], atol=1e-3)
    np.testing.assert_allclose(adjust_saturation(image, 3.0)[0, 0], [200, 0, 0], atol=1e-3)
    for seed in SEEDS:
        out = RandomAdjustSaturation()({"image": image}, np.random.default_rng(seed))["image"]
        factor = (200.0 - out[0, 0, 1]) / 100.0  # new s = 0.5 * factor; g = 200 (1 - s)
        np.testing.assert_allclose(factor, np.random.default_rng(seed).uniform(0.8, 1.25),
                                   atol=1e-5)


@pytest.mark.parametrize("ordering", [0, 1])
def test_distort_color_is_tfs_sequence(ordering):
    op = RandomDistortColor(ordering)
    steps = op.steps()
    kinds = [type(s).__name__ for s in steps]
    assert kinds == (["RandomAdjustBrightness", "RandomAdjustSaturation", "RandomAdjustHue",
                      "RandomAdjustContrast"] if ordering == 0 else
                     ["RandomAdjustBrightness", "RandomAdjustContrast",
                      "RandomAdjustSaturation", "RandomAdjustHue"])
    assert steps[0] == RandomAdjustBrightness(32 / 255)
    assert RandomAdjustHue(0.2) in steps and RandomAdjustContrast(0.5, 1.5) in steps
    assert RandomAdjustSaturation(0.5, 1.5) in steps
    rng = np.random.default_rng(0)
    sample = {"image": rng.uniform(0, 255, (6, 7, 3)).astype(np.float32),
              "boxes": np.zeros((0, 4), np.float32)}
    out = op(sample, np.random.default_rng(3))
    expected, rng = sample, np.random.default_rng(3)
    for step in steps:
        expected = step(expected, rng)
    np.testing.assert_array_equal(out["image"], expected["image"])
    assert out["image"].min() >= 0 and out["image"].max() <= 255
    assert not np.allclose(out["image"], sample["image"])


def test_black_patches(blocks):
    sample = blocks.sample()
    op = RandomBlackPatches(max_black_patches=3, probability=1.0, size_to_image_ratio=0.25)
    out = op(sample, np.random.default_rng(4))
    patches = op.patches(60, 80, np.random.default_rng(4))
    assert len(patches) == 3
    black = np.zeros((60, 80), bool)
    for y0, x0, y1, x1 in patches:
        assert (y1 - y0, x1 - x0) == (15, 15) and y0 <= 45 and x0 <= 60
        black[y0:y1, x0:x1] = True
    assert np.all(out["image"][black] == 0)
    np.testing.assert_array_equal(out["image"][~black], sample["image"][~black])
    np.testing.assert_array_equal(out["boxes"], sample["boxes"])
    none = RandomBlackPatches(probability=0.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(none["image"], sample["image"])
    counts = [len(RandomBlackPatches().patches(60, 80, np.random.default_rng(s)))
              for s in range(200)]
    assert 4.5 < np.mean(counts) < 5.5 and max(counts) <= 10


@pytest.mark.parametrize("name", sorted(OP_CLASSES))
def test_ops_handle_images_without_boxes(name, blocks):
    sample = blocks.sample(rects=())
    out = OP_CLASSES[name]()(sample, np.random.default_rng(0))
    assert out["boxes"].shape == (0, 4) and out["classes"].shape == (0,)
    assert out["image"].dtype == np.float32 and out["image"].ndim == 3
