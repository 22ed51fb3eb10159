"""Decoding any Pillow image mode to uint8 RGB, and clear errors for broken files."""

import numpy as np
import pytest
from PIL import Image

from jaxdet.data.decode import CorruptImageError, load_image


@pytest.fixture
def rgb():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)


def test_rgb_png_roundtrip(tmp_path, rgb):
    Image.fromarray(rgb).save(tmp_path / "a.png")
    out = load_image(tmp_path / "a.png")
    assert out.dtype == np.uint8 and out.shape == (12, 16, 3)
    np.testing.assert_array_equal(out, rgb)


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGBA", "1"])
def test_modes_become_rgb(tmp_path, rgb, mode):
    image = Image.fromarray(rgb).convert(mode)
    image.save(tmp_path / "a.png")
    out = load_image(tmp_path / "a.png")
    assert out.shape == (12, 16, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, np.asarray(image.convert("RGB")))


def test_rgba_drops_alpha(tmp_path, rgb):
    rgba = np.concatenate([rgb, np.zeros((12, 16, 1), np.uint8)], axis=-1)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    np.testing.assert_array_equal(load_image(tmp_path / "a.png"), rgb)


def test_cmyk_jpeg(tmp_path, rgb):
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "a.jpg", quality=95)
    out = load_image(tmp_path / "a.jpg")
    assert out.shape == (12, 16, 3) and out.dtype == np.uint8


def test_16_bit_is_scaled(tmp_path):
    values = np.array([[0, 257, 257 * 100, 65535]], np.uint16)
    image = Image.fromarray(values)
    assert image.mode == "I;16"
    image.save(tmp_path / "a.png")
    out = load_image(tmp_path / "a.png")
    np.testing.assert_array_equal(out[..., 0], [[0, 1, 100, 255]])
    np.testing.assert_array_equal(out[..., 0], out[..., 2])


def test_32_bit_int_mode(tmp_path):
    values = np.array([[0, 257 * 50, 65535]], np.int32)
    image = Image.fromarray(values, "I")
    image.save(tmp_path / "a.tiff")
    np.testing.assert_array_equal(load_image(tmp_path / "a.tiff")[..., 1], [[0, 50, 255]])


def test_missing_file(tmp_path):
    with pytest.raises(CorruptImageError, match="not found") as e:
        load_image(tmp_path / "nope.jpg")
    assert e.value.path.endswith("nope.jpg")


def test_truncated_jpeg(tmp_path):
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "a.jpg")
    data = (tmp_path / "a.jpg").read_bytes()
    (tmp_path / "b.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptImageError) as e:
        load_image(tmp_path / "b.jpg")
    assert "b.jpg" in str(e.value) and e.value.reason


def test_garbage_and_empty_files(tmp_path):
    (tmp_path / "g.jpg").write_bytes(b"this is not an image")
    (tmp_path / "e.png").write_bytes(b"")
    for name in ("g.jpg", "e.png"):
        with pytest.raises(CorruptImageError, match=name):
            load_image(tmp_path / name)


def test_error_pickles():
    import pickle

    err = pickle.loads(pickle.dumps(CorruptImageError("/x.jpg", "broken")))
    assert err.path == "/x.jpg" and err.reason == "broken"
