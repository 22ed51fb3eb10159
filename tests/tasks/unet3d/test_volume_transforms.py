"""Volume preprocessing and augmentation with hand-checked positions and values."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdet.tasks.unet3d.volume_transforms import (
    PatchAugment,
    clip_and_normalize,
    foreground_voxels,
    random_brightness,
    random_flip,
    random_noise,
    random_rotate_scale,
    resample_to_spacing,
    rotate_scale,
    sample_patch,
)


def _coded(shape):
    """Image whose voxel (d, h, w) holds d * 10000 + h * 100 + w (its own position)."""
    d, h, w = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    return (d * 10000 + h * 100 + w).astype(np.float32)[..., None]


def _position(value):
    v = int(round(float(value)))
    return v // 10000, (v // 100) % 100, v % 100


def test_resample_doubles_depth_and_keeps_block_extent():
    depth = np.broadcast_to(np.arange(8, dtype=np.float32)[:, None, None, None], (8, 10, 12, 1))
    label = np.zeros((8, 10, 12), np.int32)
    label[2:5, 3:7, 4:9] = 2  # 6 mm deep at 2 mm spacing: slices 2..4 -> 4 mm .. 10 mm
    image, out_label, spacing = resample_to_spacing(depth, label, (2.0, 1.0, 1.0), (1, 1, 1))
    assert image.shape == (16, 10, 12, 1) and out_label.shape == (16, 10, 12)
    assert spacing == (1.0, 1.0, 1.0)
    assert image.dtype == np.float32 and out_label.dtype == np.int32
    zs, ys, xs = np.nonzero(out_label)
    assert (zs.min(), zs.max() + 1) == (4, 10)  # same 6 mm, now 6 slices
    assert (ys.min(), ys.max() + 1, xs.min(), xs.max() + 1) == (3, 7, 4, 9)
    assert set(np.unique(out_label)) == {0, 2}
    # output slice o is centred on input depth o / 2 - 0.25 (edges held)
    expect = np.clip(np.arange(16) / 2 - 0.25, 0, 7)
    np.testing.assert_allclose(image[:, 5, 5, 0], expect, atol=1e-6)


def test_resample_in_plane_and_noop():
    image = np.ones((8, 10, 12, 2), np.float32)
    label = np.zeros((8, 10, 12), np.int32)
    out, lab, spacing = resample_to_spacing(image, label, (1.0, 0.8, 0.8), (1.0, 1.6, 1.6))
    assert out.shape == (8, 5, 6, 2) and lab.shape == (8, 5, 6)
    np.testing.assert_allclose(spacing, (1.0, 1.6, 1.6))
    np.testing.assert_allclose(out, 1.0)
    same = resample_to_spacing(image, label, (1.6, 1.2, 1.2), (1.6, 1.2, 1.2))
    assert same[0] is image and same[1] is label and same[2] == (1.6, 1.2, 1.2)
    # rounding: 10 voxels of 1.0 -> 1.5 gives 7 voxels of 10/7
    out, none, spacing = resample_to_spacing(image, None, (1.0, 1.0, 1.0), (1.0, 1.5, 1.0))
    assert none is None and out.shape == (8, 7, 12, 2)
    np.testing.assert_allclose(spacing, (1.0, 10 / 7, 1.0))


def test_clip_and_normalize_by_hand():
    x = np.array([-100.0, 0.0, 50.0, 400.0], np.float32).reshape(1, 1, 4, 1)
    fixed = clip_and_normalize(x, clip=(-79, 304), mean=101.0, std=76.9)
    np.testing.assert_allclose(fixed.ravel(), [-2.3407022, -1.3133940, -0.6631990, 2.6397919],
                               rtol=1e-6)
    # z-score of the clipped values [-79, 0, 50, 304]: mean 68.75, std 143.39696
    z = clip_and_normalize(x, clip=(-79, 304), mean=None, std=None)
    np.testing.assert_allclose(z.ravel(), [-1.0303566, -0.4794383, -0.1307559, 1.6405508],
                               rtol=1e-5)
    assert z.dtype == np.float32
    flat = clip_and_normalize(np.full((2, 2, 2, 1), 5.0, np.float32))
    np.testing.assert_array_equal(flat, 0.0)


def test_sample_patch_with_foreground_probability_one_contains_it():
    image = _coded((20, 20, 20))
    label = np.zeros((20, 20, 20), np.int32)
    label[17, 3, 11] = 1
    label[2, 15, 15] = 2
    for seed in range(40):
        patch, plab = sample_patch(image, label, (6, 6, 6), np.random.default_rng(seed),
                                   foreground_probability=1.0)
        assert patch.shape == (6, 6, 6, 1) and plab.shape == (6, 6, 6)
        assert plab.max() > 0
        d0, h0, w0 = _position(patch[0, 0, 0, 0])
        np.testing.assert_array_equal(patch, image[d0:d0 + 6, h0:h0 + 6, w0:w0 + 6])
        np.testing.assert_array_equal(plab, label[d0:d0 + 6, h0:h0 + 6, w0:w0 + 6])
        # the voxel is within a quarter patch (1 voxel) of the centre (3) unless clamped
        (z, y, x), = np.argwhere(plab > 0)[:1]
        if 0 < d0 < 14 and 0 < h0 < 14 and 0 < w0 < 14:
            assert {int(z), int(y), int(x)} <= {2, 3, 4}
    # both classes get picked (class-balanced), and precomputed voxels give the same patches
    fg = foreground_voxels(label)
    assert {k: v.tolist() for k, v in fg.items()} == {1: [17 * 400 + 3 * 20 + 11],
                                                      2: [2 * 400 + 15 * 20 + 15]}
    classes = set()
    for seed in range(20):
        a = sample_patch(image, label, (6, 6, 6), np.random.default_rng(seed),
                         foreground_probability=1.0)
        b = sample_patch(image, label, (6, 6, 6), np.random.default_rng(seed),
                         foreground_probability=1.0, foreground=fg)
        np.testing.assert_array_equal(a[0], b[0])
        classes.add(int(a[1].max()))
    assert classes == {1, 2}


def test_sample_patch_uniform_covers_every_start_and_no_foreground_falls_back():
    image = _coded((5, 6, 7))
    label = np.zeros((5, 6, 7), np.int32)
    starts = set()
    for seed in range(200):
        patch, _ = sample_patch(image, label, (4, 4, 4), np.random.default_rng(seed),
                                foreground_probability=1.0)  # no foreground: uniform
        starts.add(_position(patch[0, 0, 0, 0]))
    assert starts == {(d, h, w) for d in range(2) for h in range(3) for w in range(4)}


def test_sample_patch_pads_a_small_volume():
    image = _coded((3, 4, 5)) + 7.0  # minimum 7
    label = np.ones((3, 4, 5), np.int32)
    patch, plab = sample_patch(image, label, (5, 6, 5), np.random.default_rng(0))
    assert patch.shape == (5, 6, 5, 1) and plab.shape == (5, 6, 5)
    # centred padding: 1 before and 1 after on D and H, none on W
    np.testing.assert_array_equal(patch[1:4, 1:5], image)
    np.testing.assert_array_equal(plab[1:4, 1:5], 1)
    assert plab.sum() == 3 * 4 * 5
    assert np.all(patch[0] == 7.0) and np.all(patch[:, 5] == 7.0)


def test_flips_move_image_and_label_together():
    image = np.zeros((8, 10, 12, 1), np.float32)
    label = np.zeros((8, 10, 12), np.int32)
    image[1, 2, 3, 0], label[1, 2, 3] = 5.0, 1
    out, lab = random_flip(image, label, np.random.default_rng(0), probability=1.0)
    assert np.argwhere(out[..., 0] == 5.0).tolist() == [[6, 7, 8]]
    assert np.argwhere(lab == 1).tolist() == [[6, 7, 8]]
    out, lab = random_flip(image, label, np.random.default_rng(0), probability=0.0)
    assert np.argwhere(lab == 1).tolist() == [[1, 2, 3]]
    seen = set()
    for seed in range(30):
        out, lab = random_flip(image, label, np.random.default_rng(seed))
        where = np.argwhere(lab == 1).tolist()
        assert np.argwhere(out[..., 0] == 5.0).tolist() == where
        seen.add(tuple(where[0]))
        assert out.flags.c_contiguous and lab.flags.c_contiguous
    assert len(seen) > 3  # several flip combinations happened


def _marker_volume():
    image = np.zeros((9, 11, 11, 1), np.float32)
    label = np.zeros((9, 11, 11), np.int32)
    image[3:6, 1:4, 6:9, 0] = 10.0  # 3-cube centred at (4, 2, 7)
    label[3:6, 1:4, 6:9] = 2
    return image, label


def test_rotate_90_about_depth_moves_marker_by_hand():
    image, label = _marker_volume()
    out, lab = rotate_scale(image, label, axis=0, degrees=90.0)
    assert out.shape == image.shape and lab.shape == label.shape
    # centre c = (4, 5, 5); p = (4, 2, 7) -> (4, c_h - (p_w - c_w), c_w + (p_h - c_h)) = (4, 3, 2)
    np.testing.assert_allclose(np.argwhere(lab == 2).mean(axis=0), (4, 3, 2), atol=1e-6)
    assert (lab == 2).sum() == 27
    np.testing.assert_allclose(np.argwhere(out[..., 0] > 5).mean(axis=0), (4, 3, 2), atol=1e-6)
    # scale 2 about the centre, no rotation: a 3-cube at offset (0, -1, 1) from the centre
    # becomes a 6-cube at offset (0, -2, 2)
    label = np.zeros_like(label)
    label[3:6, 3:6, 5:8] = 1
    _, lab = rotate_scale(image, label, axis=1, degrees=0.0, scale=2.0)
    where = np.argwhere(lab == 1)
    np.testing.assert_allclose(where.mean(axis=0), (4, 3, 7), atol=0.6)
    np.testing.assert_array_equal(where.max(axis=0) - where.min(axis=0) + 1, (6, 6, 6))


def test_random_rotate_scale_keeps_label_values_and_moves_marker_with_image():
    image, label = _marker_volume()
    label[0, 0, 0] = 1
    out, lab = random_rotate_scale(image, label, np.random.default_rng(0), max_degrees=30,
                                   scale_range=(0.9, 1.1), probability=0.0)
    assert out is image and lab is label
    for seed in range(6):
        out, lab = random_rotate_scale(image, label, np.random.default_rng(seed),
                                       max_degrees=30, scale_range=(0.9, 1.1), probability=1.0)
        assert set(np.unique(lab)) <= {0, 1, 2}
        marker = np.argwhere(lab == 2).mean(axis=0)
        bright = np.argwhere(out[..., 0] > 5).mean(axis=0)
        np.testing.assert_allclose(marker, bright, atol=0.75)
        assert np.linalg.norm(marker - (4, 2, 7)) < 2.0  # at most 30 degrees and 10 %


def test_brightness_and_noise():
    image = np.full((4, 4, 4, 1), 2.0, np.float32)
    assert random_brightness(image, np.random.default_rng(0), probability=0.0) is image
    out = random_brightness(image, np.random.default_rng(0), scale_range=(1.5, 1.5),
                            probability=1.0)
    np.testing.assert_allclose(out, 3.0)
    rng = np.random.default_rng(5)
    out = random_brightness(image, rng, probability=1.0)
    check = np.random.default_rng(5)
    check.random()
    np.testing.assert_allclose(out, 2.0 * check.uniform(0.7, 1.3), rtol=1e-6)

    big = np.zeros((32, 32, 32, 1), np.float32)
    assert random_noise(big, np.random.default_rng(0), probability=0.0) is big
    check = np.random.default_rng(3)
    check.random()
    std = check.uniform(0.0, 0.1)
    noisy = random_noise(big, np.random.default_rng(3), probability=1.0)
    assert noisy.dtype == np.float32
    np.testing.assert_allclose(noisy.std(), std, rtol=0.03)


def test_patch_augment_shapes_determinism_and_checks():
    image = _coded((12, 14, 16)) / 1e4
    label = np.zeros((12, 14, 16), np.int32)
    label[10:12, 0:2, 14:16] = 1
    augment = PatchAugment(foreground_probability=1.0, rotate_degrees=10.0,
                           scale_range=(0.9, 1.1), rotate_probability=0.5,
                           brightness_probability=0.5, noise_probability=0.5)
    for seed in range(8):
        a = augment(image, label, (8, 8, 8), np.random.default_rng(seed))
        b = augment(image, label, (8, 8, 8), np.random.default_rng(seed))
        assert a[0].shape == (8, 8, 8, 1) and a[1].shape == (8, 8, 8)
        assert a[0].dtype == np.float32 and a[1].dtype == np.int32
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert a[1].max() == 1  # balanced crop, then moves that keep the 8-voxel block in
    with pytest.raises(ValueError, match="flip_probability"):
        PatchAugment(flip_probability=1.5)
    with pytest.raises(ValueError, match="scale_range"):
        PatchAugment(scale_range=(1.2, 0.8))
