"""JPEG decode modes: ``tf`` gives TensorFlow's pixels bit for bit, ``accurate`` Pillow's.

The fixtures (fixtures/make_tf_jpeg_fixtures.py, run with the real TF peer) are JPEGs of real
photos in several codings and the SHA-256 of the pixels ``tf.io.decode_jpeg`` gives; with
``../shared`` present the shared photos and the pets TFRecord's images are checked too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.data.decode import CorruptImageError, load_image, load_image_bytes
from jaxdet.data.tfrecord import iter_tfrecord, parse_example

FIXTURES = Path(__file__).parent / "fixtures"
TF = json.loads((FIXTURES / "tf_decoded.json").read_text())
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _check_tf(pixels: np.ndarray, entry: dict, what: str) -> None:
    assert list(pixels.shape) == entry["shape"], what
    if hashlib.sha256(pixels.tobytes()).hexdigest() != entry["pixels_sha256"]:
        detail = ""
        if "samples" in entry:
            got = pixels.reshape(-1)[::entry["sample_stride"]].astype(int)
            diff = np.abs(got - np.asarray(entry["samples"]))
            detail = f": {int((diff > 0).sum())} of {diff.size} sampled values differ, by up to "\
                     f"{int(diff.max())}"
        pytest.fail(f"{what} does not decode to TF's pixels{detail}")


@pytest.mark.parametrize("name", sorted(TF["fixtures"]))
def test_tf_mode_is_bit_equal_to_tensorflow(name):
    data = (FIXTURES / "jpeg" / name).read_bytes()
    entry = TF["fixtures"][name]
    assert hashlib.sha256(data).hexdigest() == entry["file_sha256"]
    _check_tf(load_image_bytes(data, name, "tf"), entry, name)
    _check_tf(load_image(FIXTURES / "jpeg" / name, "tf"), entry, name)


@pytest.mark.parametrize("name", sorted(n for n in TF["fixtures"] if "cmyk" not in n))
def test_accurate_mode_is_pillows_decode(name):
    path = FIXTURES / "jpeg" / name
    expected = np.asarray(Image.open(path).convert("RGB"))
    np.testing.assert_array_equal(load_image(path), expected)
    tf = load_image(path, "tf").astype(int)
    assert (tf != expected).mean() > 0.2  # the two modes really differ on photos
    assert np.abs(tf - expected).mean() < 2.0  # ... by about a level


def test_cmyk_accurate_mode_keeps_pillows_conversion():
    path = FIXTURES / "jpeg" / "photo_cmyk.jpg"
    np.testing.assert_array_equal(load_image(path), np.asarray(Image.open(path).convert("RGB")))


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="allowed: accurate, tf"):
        load_image_bytes(b"\xff\xd8\xff", "x.jpg", "fast")


def test_truncated_jpeg_is_an_error_in_both_modes():
    data = (FIXTURES / "jpeg" / "photo_420_q90.jpg").read_bytes()
    for mode in ("accurate", "tf"):
        with pytest.raises(CorruptImageError, match="truncated"):
            load_image_bytes(data[: len(data) // 2], "half.jpg", mode)


def test_png_decodes_the_same_in_both_modes(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (9, 7, 3), dtype=np.uint8)
    Image.fromarray(image).save(tmp_path / "a.png")
    for mode in ("accurate", "tf"):
        np.testing.assert_array_equal(load_image(tmp_path / "a.png", mode), image)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
@pytest.mark.parametrize("name", sorted(TF["shared"]))
def test_shared_photos_decode_as_tf_decodes_them(name):
    _check_tf(load_image(SHARED / name, "tf"), TF["shared"][name], name)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_pets_tfrecord_images_decode_as_tf_decodes_them():
    record = SHARED / "tfod" / "pets_examples.record"
    expected = TF["pets_examples.record"]
    seen = 0
    for index, (_, data) in enumerate(iter_tfrecord(record)):
        encoded = parse_example(data)["image/encoded"][0]
        _check_tf(load_image_bytes(encoded, f"record {index}", "tf"), expected[str(index)],
                  f"{record.name} record {index}")
        seen += 1
    assert seen == len(expected) == 10
