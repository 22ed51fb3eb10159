"""Raw pixels to the device: uint8 loader batches are the float pipeline's values rounded once,
and the device normalization equals the host's Normalize op."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.data import build as data_build
from jaxdet.data.augment import (
    Normalize,
    RandomHorizontalFlip,
    RandomScaleCropAndPadToSquare,
    SSDRandomCrop,
)
from jaxdet.data.augment_color import RandomAdjustBrightness
from jaxdet.data.augment_crop import RandomCropImage, RandomPadImage
from jaxdet.data.batch_layout import BatchField, check_batch
from jaxdet.data.coco import CocoSource
from jaxdet.data.geometry import resize_image_tf
from jaxdet.data.loader import make_train_loader
from jaxdet.data.normalize import PixelNormalizer, transfer_layout
from jaxdet.data.resize import FixedShapeResizer, KeepAspectRatioResizer

MEAN, STD = (123.68, 116.78, 103.94), (58.4, 57.1, 57.4)


@pytest.fixture
def source(shapes_dir):
    return CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")


PIPELINES = {
    "ssd_crop": [RandomHorizontalFlip(), SSDRandomCrop(), FixedShapeResizer(40, 40,
                                                                          "tf_bilinear")],
    "crop_image": [RandomHorizontalFlip(), RandomCropImage(), FixedShapeResizer(48, 36)],
    "colour_first": [RandomAdjustBrightness(), RandomCropImage(),
                     FixedShapeResizer(40, 40, "tf_bilinear")],
    "scale_pad": [RandomHorizontalFlip(), RandomScaleCropAndPadToSquare(48, 0.5, 1.5,
                                                                        method="tf_bilinear"),
                  KeepAspectRatioResizer(48, 48, method="tf_bilinear")],
    "pad_keep_aspect": [RandomPadImage(), KeepAspectRatioResizer(32, 40)],
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_uint8_batches_are_the_float_pipeline_rounded_once(source, name):
    """Each pipeline computes fractional values once (a resize, or a colour op whose float
    result the resize carries on): its uint8 batches are the float32 ones rounded, and every
    other field is the same."""
    ops = PIPELINES[name]
    kwargs = dict(batch_size=4, max_boxes=6, seed=5)
    exact = [next(it) for it in [make_train_loader(source, ops, **kwargs)] for _ in range(3)]
    fast = make_train_loader(source, ops, image_dtype="uint8", **kwargs)
    for a in exact:
        b = next(fast)
        assert b["images"].dtype == np.uint8 and a["images"].dtype == np.float32
        if name == "pad_keep_aspect":  # the mean-colour pad is rounded, then resized: 2 roundings
            assert np.abs(b["images"].astype(np.float32) - a["images"]).max() <= 1.0
        else:
            np.testing.assert_array_equal(b["images"], np.clip(np.rint(a["images"]), 0, 255))
        for key in a:
            if key != "images":
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_scale_crop_pad_is_resize_then_crop():
    """The op resamples only its crop: TF's resize of the whole image, then cropped, bit for
    bit."""
    rng = np.random.default_rng(0)
    image = (rng.integers(0, 256, (50, 70, 3)) + rng.random((50, 70, 3))).astype(np.float32)
    sample = {"image": image, "boxes": np.zeros((0, 4), np.float32),
              "classes": np.zeros((0,), np.int32), "is_crowd": np.zeros((0,), bool)}
    op = RandomScaleCropAndPadToSquare(40, 1.4, 1.9, method="tf_bilinear")
    for seed in range(5):
        draw = np.random.default_rng(seed)
        scale = draw.uniform(1.4, 1.9)
        h, w = int(scale * 40 * 50 / 70), int(scale * 40)
        off_y, off_x = int(max(0, h - 40) * draw.random()), int(max(0, w - 40) * draw.random())
        out = op(sample, np.random.default_rng(seed))
        full = resize_image_tf(image, h, w)[off_y:off_y + 40, off_x:off_x + 40]
        np.testing.assert_array_equal(out["image"][:full.shape[0], :full.shape[1]], full)
        assert not out["image"][full.shape[0]:].any()


@pytest.mark.parametrize("zero_padding", [True, False])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_device_normalization_equals_the_host_op(zero_padding, dtype):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (3, 24, 20, 3)).astype(dtype)
    info = np.array([[30, 25, 24, 20], [30, 25, 17, 20], [40, 10, 24, 9]], np.float32)
    op = Normalize(MEAN, STD, zero_padding=zero_padding)
    host = np.stack([op({"image": images[i], "image_info": info[i]})["image"]
                     for i in range(3)])
    normalizer = PixelNormalizer(MEAN, STD, zero_padding=zero_padding)
    device = jax.jit(normalizer)(jnp.asarray(images), jnp.asarray(info))
    assert device.dtype == jnp.float32
    # the same float32 multiply-add (XLA may fuse it: one rounding instead of two)
    np.testing.assert_allclose(np.asarray(device), host, rtol=0, atol=5e-7)
    if zero_padding:
        assert not np.asarray(device)[1, 17:].any() and not np.asarray(device)[2, :, 9:].any()


def test_mobilenet_normalization_is_tfs_formula():
    """mean = std = 127.5 is TF's MobileNet preprocessing (2 / 255) * x - 1, exactly."""
    x = np.arange(256, dtype=np.float32).reshape(1, 16, 16, 1).repeat(3, -1)
    info = np.array([[16, 16, 16, 16]], np.float32)
    got = PixelNormalizer((127.5,) * 3, (127.5,) * 3)(jnp.asarray(x), jnp.asarray(info))
    np.testing.assert_array_equal(np.asarray(got), np.float32(2.0 / 255.0) * x - np.float32(1))


def test_transfer_layout():
    layout = {"images": BatchField((32, 32, 3), jnp.float32, spatial_axis=0),
              "boxes": BatchField((5, 4), jnp.float32)}
    raw = transfer_layout(layout, "uint8")
    assert raw["images"] == BatchField((32, 32, 3), np.dtype(np.uint8), spatial_axis=0)
    assert raw["image_info"].shape == (4,) and raw["boxes"] == layout["boxes"]


def test_train_loader_batches_fit_the_transfer_layout(tiny_config, tmp_path):
    task = tasks.build_task(tiny_config)
    layout = data_build.train_batch_layout(tiny_config, task)
    assert layout["images"].dtype == np.uint8 and "image_info" in layout
    source = data_build.build_source(tiny_config.data.train, tmp_path)
    loader = data_build.build_train_loader(tiny_config, source, layout=layout)
    try:
        batch = next(loader)  # checked against the layout on the first batch
    finally:
        loader.close()
    check_batch(layout, batch, where="test")
    assert batch["images"].dtype == np.uint8
    float32 = data_build.train_batch_layout(
        tiny_config.model_copy(update={"data": tiny_config.data.model_copy(
            update={"train_image_dtype": "float32"})}), task)
    assert float32["images"].dtype == np.float32


def test_normalization_in_the_networks_dtype_is_the_float32_result_cast():
    rng = np.random.default_rng(2)
    images = jnp.asarray(rng.integers(0, 256, (2, 16, 12, 3)), jnp.uint8)
    info = jnp.asarray([[16, 12, 10, 12], [16, 12, 16, 7]], jnp.float32)
    full = PixelNormalizer(MEAN, STD)
    for dtype in (jnp.bfloat16, jnp.float16):
        half = jax.jit(PixelNormalizer(MEAN, STD, dtype=dtype))(images, info)
        cast = jax.jit(lambda i, n, d=dtype: full(i, n).astype(d))(images, info)
        assert half.dtype == dtype
        np.testing.assert_array_equal(np.asarray(half), np.asarray(cast))


def test_batches_reach_the_cpu_device_without_a_copy(source):
    """The loader's image batches start on a 64-byte boundary, so on the CPU backend
    ``jax.device_put`` uses their memory as it is (a copy cost 0.7 ms per 640x640 batch of 8)."""
    loader = make_train_loader(source, [FixedShapeResizer(40, 40)], batch_size=3, max_boxes=8,
                               seed=0, image_dtype="uint8")
    for _ in range(2):
        images = next(loader)["images"]
        assert images.ctypes.data % 64 == 0 and images.flags.c_contiguous
        on_device = jax.device_put(images)
        assert on_device.unsafe_buffer_pointer() == images.ctypes.data
        np.testing.assert_array_equal(np.asarray(on_device), images)
