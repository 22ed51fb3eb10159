"""The host resampler: TF's bilinear resize bit for bit, Pillow's filter, views, canvases, and
the C kernel equal to its numpy path."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from jaxdet.data import resample as R

RNG = np.random.default_rng(0)


def tf_reference(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """TF v1 ``resize_bilinear`` (align_corners=False, half_pixel_centers=False) written out
    as TF's kernel computes it, in float32."""
    image = image.astype(np.float32)
    in_h, in_w = image.shape[:2]
    out = np.empty((height, width, image.shape[2]), np.float32)
    sy, sx = np.float32(in_h) / np.float32(height), np.float32(in_w) / np.float32(width)
    for i in range(height):
        y = np.float32(i) * sy
        y0 = int(np.floor(y))
        y1, dy = min(y0 + 1, in_h - 1), np.float32(y - np.float32(y0))
        for j in range(width):
            x = np.float32(j) * sx
            x0 = int(np.floor(x))
            x1, dx = min(x0 + 1, in_w - 1), np.float32(x - np.float32(x0))
            top = image[y0, x0] + (image[y0, x1] - image[y0, x0]) * dx
            bottom = image[y1, x0] + (image[y1, x1] - image[y1, x0]) * dx
            out[i, j] = top + (bottom - top) * dy
    return out


def pillow(image: np.ndarray, height: int, width: int) -> np.ndarray:
    return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(image[..., c], np.float32),
                                                "F").resize((width, height), Image.BILINEAR))
                     for c in range(image.shape[2])], axis=-1)


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Both implementations: the C kernel (skipped without a compiler) and numpy."""
    if request.param == "numpy":
        monkeypatch.setenv(R.OPT_OUT, "0")
    elif not R.native_available():
        pytest.skip("no C compiler: the resampler runs in numpy")
    return request.param


def test_tf_axis_by_hand():
    axis = R.tf_axis(4, 3)  # samples 0, 4/3, 8/3
    assert axis.lower.tolist() == [0, 1, 2] and axis.upper.tolist() == [1, 2, 3]
    np.testing.assert_allclose(axis.weight, [0.0, 1 / 3, 2 / 3], rtol=1e-6)
    assert R.tf_axis(3, 5).upper.tolist() == [1, 1, 2, 2, 2]  # clamped to the last pixel


def test_pil_axis_by_hand():
    up = R.pil_axis(2, 4)  # centres 0.25, 0.75, 1.25, 1.75 of 2 pixels: support 1
    assert up.start.tolist() == [0, 0, 0, 1] and up.count.tolist() == [1, 2, 2, 1]
    np.testing.assert_allclose(up.weights[1, :2], [0.75, 0.25])  # pixel centres 0.5, 1.5
    # a factor-2 reduction: support 2, output 0 centred at 1.0 reads pixels 0, 1, 2 at
    # distances 0.25, 0.25, 0.75 (in units of 2 pixels): 0.75, 0.75, 0.25, normalized
    down = R.pil_axis(4, 2)
    assert down.start.tolist() == [0, 1] and down.count.tolist() == [3, 3]
    np.testing.assert_allclose(down.weights[0, :3], [3 / 7, 3 / 7, 1 / 7])


def test_tiny_tf_resize_by_hand(path):
    image = np.array([[0, 10], [20, 30]], np.float32)[..., None]
    out = R.resize(image, 3, 3, "tf_bilinear")[..., 0]
    # rows/cols sample 0, 2/3, 4/3 -> clamped: 0, 2/3, 1
    expected = np.array([[0, 20 / 3, 10], [40 / 3, 20, 70 / 3], [20, 80 / 3, 30]], np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_tf_bilinear_is_bit_equal_to_tfs_arithmetic(path, seed):
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(1, 40, 2))
    oh, ow = (int(v) for v in rng.integers(1, 50, 2))
    image = (rng.integers(0, 256, (h, w, 3)) + rng.random((h, w, 3))).astype(np.float32)
    np.testing.assert_array_equal(R.resize(image, oh, ow, "tf_bilinear"),
                                  tf_reference(image, oh, ow))


@pytest.mark.parametrize("shape", [(37, 29, 51, 45), (61, 22, 19, 5), (30, 40, 30, 90),
                                   (48, 30, 17, 30), (9, 70, 120, 33)])
def test_bilinear_is_pillows_filter(path, shape):
    """Equal to Pillow's float resize to one float32 ulp (Pillow 13 runs the two passes in
    either order), and bit-equal when only one axis changes (one pass)."""
    h, w, oh, ow = shape
    image = (RNG.integers(0, 256, (h, w, 3)) + RNG.random((h, w, 3))).astype(np.float32)
    got, expected = R.resize(image, oh, ow, "bilinear"), pillow(image, oh, ow)
    if h == oh or w == ow:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=3e-5)


@pytest.mark.parametrize("method", R.METHODS)
def test_uint8_is_the_float_result_rounded(path, method):
    image = RNG.integers(0, 256, (23, 31, 3), dtype=np.uint8)
    got = R.resize(image, 40, 17, method)
    assert got.dtype == np.uint8
    exact = R.resize(image.astype(np.float32), 40, 17, method)
    np.testing.assert_array_equal(got, np.clip(np.rint(exact), 0, 255).astype(np.uint8))


@pytest.mark.parametrize("method", R.METHODS)
def test_views_and_canvas_slices(path, method):
    """A flipped / cropped view reads as its copy; writing into a canvas slice leaves the
    rest of the canvas untouched; a crop of the resize is the resize's crop."""
    image = RNG.integers(0, 256, (33, 41, 3), dtype=np.uint8)
    view = image[3:30, ::-1][:, 2:37]
    np.testing.assert_array_equal(R.resize(view, 20, 26, method),
                                  R.resize(np.ascontiguousarray(view), 20, 26, method))
    canvas = np.full((32, 32, 3), 7, np.uint8)
    R.resize(view, 20, 26, method, out=canvas[5:25, 3:29])
    np.testing.assert_array_equal(canvas[5:25, 3:29], R.resize(view, 20, 26, method))
    assert (canvas[:5] == 7).all() and (canvas[:, 29:] == 7).all()
    rows, cols = R.axes(method, image.shape[:2], (50, 60))
    crop = R.resample(image, rows[11:31], cols[7:50])
    np.testing.assert_array_equal(crop, R.resize(image, 50, 60, method)[11:31, 7:50])


def test_native_equals_numpy(monkeypatch):
    if not R.native_available():
        pytest.skip("no C compiler")
    cases = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        h, w, oh, ow = (int(v) for v in rng.integers(1, 60, 4))
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)[:, ::-1]
        cases.append((image, oh, ow))
        cases.append((image.astype(np.float32) * 1.37, oh, ow))

    def run():
        return [R.resize(im, oh, ow, m) for im, oh, ow in cases for m in R.METHODS]

    native = run()
    monkeypatch.setenv(R.OPT_OUT, "0")
    for a, b in zip(native, run(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_same_size_returns_the_values():
    image = RNG.integers(0, 256, (5, 6, 3), dtype=np.uint8)
    for method in R.METHODS:
        np.testing.assert_array_equal(R.resize(image, 5, 6, method), image)


def test_bad_arguments():
    image = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="allowed: bilinear, tf_bilinear"):
        R.resize(image, 2, 2, "nearest")
    with pytest.raises(ValueError, match="cannot resize"):
        R.resize(image, 0, 2, "tf_bilinear")
    with pytest.raises(ValueError, match="both be LerpAxis or both TapsAxis"):
        R.resample(image, R.tf_axis(4, 2), R.pil_axis(4, 2))
    with pytest.raises(ValueError, match="out must be"):
        R.resample(image, R.tf_axis(4, 2), R.tf_axis(4, 2), out=np.zeros((3, 2, 3), np.uint8))
