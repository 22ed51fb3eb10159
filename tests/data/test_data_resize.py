"""Resizers: hand-computed sizes, image_info and box normalization to the padded canvas."""

import numpy as np
import pytest

from jaxdet.data.resize import FixedShapeResizer, KeepAspectRatioResizer, keep_aspect_ratio_size


def test_fixed_shape_resizer(blocks):
    resizer = FixedShapeResizer(64, 32)
    assert resizer.output_size == (64, 32)
    sample = blocks.sample(40, 80, rects=((10, 20, 30, 60),))
    out = resizer(sample)
    assert out["image"].shape == (64, 32, 3) and out["image"].dtype == np.float32
    np.testing.assert_allclose(out["image_info"], [40, 80, 64, 32])
    np.testing.assert_allclose(out["boxes"], [[0.25, 0.25, 0.75, 0.75]])
    blocks.assert_frame(out, tol=1.0)


def test_keep_aspect_ratio_min_side_bound(blocks):
    # 40x80 -> shorter side 32 gives 32x64 (<= 64): padded to 64x64 at the bottom.
    resizer = KeepAspectRatioResizer(32, 64)
    assert resizer.output_size == (64, 64)
    sample = blocks.sample(40, 80, rects=((10, 20, 30, 60),))
    out = resizer(sample)
    assert out["image"].shape == (64, 64, 3)
    np.testing.assert_allclose(out["image_info"], [40, 80, 32, 64])
    np.testing.assert_allclose(out["boxes"], [[0.25 * 32 / 64, 0.25, 0.75 * 32 / 64, 0.75]],
                               atol=1e-6)
    assert np.all(out["image"][32:] == 0)
    blocks.assert_frame(out, tol=1.0)


def test_keep_aspect_ratio_max_side_bound(blocks):
    # 30x90: shorter side 32 would give 32x96 > 64, so the longer side -> 64: 21x64.
    assert keep_aspect_ratio_size(30, 90, 32, 64) == (21, 64)
    sample = blocks.sample(30, 90, rects=((6, 18, 24, 72),))
    out = KeepAspectRatioResizer(32, 64)(sample)
    np.testing.assert_allclose(out["image_info"], [30, 90, 21, 64])
    np.testing.assert_allclose(out["boxes"], [[0.2 * 21 / 64, 0.2, 0.8 * 21 / 64, 0.8]],
                               atol=1e-6)
    blocks.assert_frame(out, tol=1.0)


def test_keep_aspect_ratio_without_padding(blocks):
    resizer = KeepAspectRatioResizer(32, 64, pad_to_max_dimension=False)
    assert resizer.output_size is None
    out = resizer(blocks.sample(30, 90, rects=((6, 18, 24, 72),)))
    assert out["image"].shape == (21, 64, 3)
    np.testing.assert_allclose(out["boxes"], [[0.2, 0.2, 0.8, 0.8]], atol=1e-6)


def test_resizer_keeps_original_size_from_image_info(blocks):
    sample = blocks.sample(40, 80, rects=((10, 20, 30, 60),))
    sample["image_info"] = np.array([400, 800, 40, 80], np.float32)  # e.g. after a crop
    out = KeepAspectRatioResizer(32, 64)(sample)
    np.testing.assert_allclose(out["image_info"], [400, 800, 32, 64])


def test_upscaling_block_consistency(blocks):
    out = KeepAspectRatioResizer(90, 128)(blocks.sample(30, 40, rects=((5, 7, 20, 31),)))
    np.testing.assert_allclose(out["image_info"], [30, 40, 90, 120])
    blocks.assert_frame(out, tol=1.0)


def test_resizer_validation():
    with pytest.raises(ValueError, match="min_dimension"):
        KeepAspectRatioResizer(64, 32)
    with pytest.raises(ValueError, match="positive"):
        FixedShapeResizer(0, 10)
