"""Crop-and-resize, RoI Align and FPN levels equal the TF OD API's own functions (fixture made by
TensorFlow itself, fixtures/make_roi_ops_tf.py; skipped when it is missing), eagerly and jitted,
with both back-ends; plus hand cases and gradients (autodiff == finite differences)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core import roi_ops

FIXTURE = Path(__file__).parent / "fixtures" / "roi_ops_tf.npz"
METHODS = ["gather", "matmul"]
ATOL = 1e-5


@pytest.fixture(scope="module")
def tf_out():
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE.name} missing (make it with fixtures/make_roi_ops_tf.py)")
    return dict(np.load(FIXTURE))


def _levels(tf_out):
    return [tf_out[f"ml_feat{i}"] for i in range(4)]


CROPS = [(3, 4), (1, 1), (1, 3), (2, 1)]
ML_CASES = {"ml_crop": ((3, 3), 0.0, True), "ml_crop_extrap": ((2, 4), 0.7, True),
            "ml_crop_nolevels": ((3, 2), 0.0, False)}


def _all_crops(images, boxes, method):
    out = {f"crop_{h}x{w}": roi_ops.matmul_crop_and_resize(images, boxes, (h, w), method=method)
           for h, w in CROPS}
    out["crop_3x4_extrap"] = roi_ops.matmul_crop_and_resize(images, boxes, (3, 4), -1.5,
                                                            method=method)
    return out


def _all_multilevel(feats, boxes, levels, settings, method):
    out = {}
    for name, (crop, extrap, with_levels) in ML_CASES.items():
        out[name] = roi_ops.multilevel_matmul_crop_and_resize(
            feats, boxes, levels if with_levels else None, crop, extrap, method=method)
    for k, (oy, ox, ny, nx, align, extrap) in enumerate(settings):
        out[f"ra_{k}"] = roi_ops.multilevel_roi_align(
            feats, boxes, levels, (int(oy), int(ox)), int(ny), int(nx), bool(align),
            float(extrap), method=method)
    return out


def _compare(got, tf_out):
    for name, value in got.items():
        assert value.shape == tf_out[name].shape, name
        np.testing.assert_allclose(np.asarray(value), tf_out[name], atol=ATOL, err_msg=name)


@pytest.mark.parametrize("method", METHODS)
def test_matmul_crop_and_resize_equals_tf(tf_out, method):
    got = jax.jit(_all_crops, static_argnums=2)(tf_out["crop_images"], tf_out["crop_boxes"],
                                                method)
    _compare(got, tf_out)
    # the fully-outside box (row 2 of image 0) is all extrapolation value
    np.testing.assert_allclose(got["crop_3x4_extrap"][0, 2], -1.5, atol=ATOL)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.slow
def test_multilevel_crop_and_roi_align_equal_tf(tf_out, method):
    settings = tuple(tuple(float(v) for v in row) for row in tf_out["ra_settings"])
    got = jax.jit(_all_multilevel, static_argnums=(3, 4))(
        _levels(tf_out), tf_out["ml_boxes"], tf_out["ml_levels"], settings, method)
    assert got["ml_crop"].shape == (2, 10, 3, 3, 2)
    _compare(got, tf_out)


@pytest.mark.slow
def test_eager_equals_tf_and_jit(tf_out):
    """Op by op (no jit at all; every op compiles on its own, so one case only): the crop with
    extrapolation equals TF and the jitted result."""
    images, boxes = tf_out["crop_images"], tf_out["crop_boxes"]
    with jax.disable_jit():
        crop = roi_ops.matmul_crop_and_resize(images, boxes, (3, 4), -1.5)
    np.testing.assert_allclose(crop, tf_out["crop_3x4_extrap"], atol=ATOL)
    jitted = jax.jit(lambda i, b: roi_ops.matmul_crop_and_resize(i, b, (3, 4), -1.5))(images,
                                                                                     boxes)
    np.testing.assert_allclose(crop, jitted, atol=ATOL)  # XLA fuses (FMA): not bitwise


def test_crop_equals_tf_image_crop_and_resize_where_samples_are_on_the_image(tf_out):
    images, boxes = tf_out["crop_images"], tf_out["crop_boxes"]
    _, h_img, w_img, _ = images.shape
    got = jax.jit(_all_crops, static_argnums=2)(images, boxes, "gather")

    def pos(lo, hi, size, extent):  # sample positions in pixels, crop_and_resize's formula
        if size == 1:
            return (0.5 * (lo + hi) * (extent - 1))[..., None]
        i = np.arange(size)
        return lo[..., None] * (extent - 1) + i * (hi - lo)[..., None] * (extent - 1) / (size - 1)

    for h, w in CROPS:
        ys = pos(boxes[..., 0], boxes[..., 2], h, h_img)
        xs = pos(boxes[..., 1], boxes[..., 3], w, w_img)
        on = (((ys >= 0) & (ys <= h_img - 1))[..., :, None]
              & ((xs >= 0) & (xs <= w_img - 1))[..., None, :])
        native = tf_out[f"crop_native_{h}x{w}"]
        assert on.sum() > 0.5 * on.size  # the check covers most samples
        np.testing.assert_allclose(np.asarray(got[f"crop_{h}x{w}"])[on], native[on], atol=ATOL)
    # off the image they differ: the partly-outside box (row 1) half-blends the border
    assert np.abs(np.asarray(got["crop_3x4"]) - tf_out["crop_native_3x4"]).max() > 0.1


def test_tf_floor_y_plus_one_quirk_is_not_reproduced(tf_out):
    """TF's upper neighbour is floor(y + 1): at y = 0.99999994 that is row 2, not row 1 (y + 1
    rounds up to 2.0), so TF's crop of a 2-row map gives ~0 there. We take floor(y) + 1 and
    match tf.image.crop_and_resize (~3, row 1's value)."""
    got = np.asarray(_crop(tf_out["quirk_images"], tf_out["quirk_boxes"], (1, 1)))
    np.testing.assert_allclose(tf_out["quirk_crop"].ravel(), [0.0, 3.0], atol=1e-6)  # TF
    np.testing.assert_allclose(got.ravel(), tf_out["quirk_native"].ravel(), atol=1e-5)


def test_fpn_box_levels_equal_tf(tf_out, run):
    for k in range(2):
        got = run(lambda b, r: roi_ops.fpn_box_levels(b, 4, 2, r), tf_out["fpn_boxes"],
                  tf_out[f"fpn_ratio{k}"])
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, tf_out[f"fpn_levels{k}"])
    # by hand (ratio 1): zero / negative area -> 0; sqrt area 1 -> unit index 2; 0.5 -> 1;
    # 0.25 and below -> 0 (clipped); 2 -> 3
    assert tf_out["fpn_levels0"][0, :10].tolist() == [0, 0, 0, 0, 2, 1, 0, 0, 0, 3]


_crop = jax.jit(roi_ops.matmul_crop_and_resize, static_argnums=2,
                static_argnames=("extrapolation_value", "method"))
_ml_crop = jax.jit(roi_ops.multilevel_matmul_crop_and_resize, static_argnums=3,
                   static_argnames="method")
_roi_align = jax.jit(roi_ops.multilevel_roi_align, static_argnums=(3, 4, 5, 6),
                     static_argnames="method")


@pytest.mark.parametrize("method", METHODS)
def test_crop_by_hand(method):
    img = jnp.arange(12.0).reshape(1, 3, 4, 1)
    boxes = jnp.array([[[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 1 / 3]]])
    got = np.asarray(_crop(img, boxes, (3, 4), method=method))
    np.testing.assert_allclose(got[0, 0, ..., 0], img[0, ..., 0], atol=1e-6)  # identity
    np.testing.assert_allclose(got[0, 1, ..., 0], img[0, ::-1, ::-1, 0], atol=1e-6)  # flipped
    # rows 0..1, cols 0..1 of the image, sampled at y in {0, .5, 1}, x in {0, 1/3, 2/3, 1}
    want = 4 * np.array([0, 0.5, 1])[:, None] + np.array([0, 1, 2, 3])[None, :] / 3
    np.testing.assert_allclose(got[0, 2, ..., 0], want, atol=1e-5)
    # RoI Align, one cell of 2 x 2 samples over the whole map = the mean at the quarter points
    ra = _roi_align([img], boxes[:, :1], None, (1, 1), 2, 2, method=method)
    np.testing.assert_allclose(np.asarray(ra)[0, 0, 0, 0], img.mean(), atol=1e-5)
    # a sample half a pixel above the map blends half feature, half extrapolation value
    half = jnp.array([[[-0.25, 0.0, -0.25, 0.0]]])  # y = -0.5 px, x = 0
    np.testing.assert_allclose(_crop(img, half, (1, 1), 8.0, method=method)[0, 0, 0, 0, 0],
                               0.5 * 0.0 + 0.5 * 8.0, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_multilevel_reads_only_the_box_level(method):
    small = jnp.ones((1, 2, 3, 1))
    big = jnp.full((1, 8, 8, 1), 5.0)
    boxes = jnp.tile(jnp.array([[[0.0, 0.0, 1.0, 1.0]]]), (1, 2, 1))
    got = _ml_crop([small, big], boxes, jnp.array([[1, 0]]), (2, 2), method=method)
    np.testing.assert_allclose(np.asarray(got)[0, :, ..., 0],
                               [np.full((2, 2), 5.0), np.ones((2, 2))], atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_gradients_match_finite_differences(method):
    rng = np.random.default_rng(1)
    img = jnp.asarray(rng.normal(size=(1, 3, 4, 2)), jnp.float32)
    boxes = jnp.array([[[-0.2, 0.1, 0.9, 0.8], [0.7, 0.6, 0.1, 0.05]]])
    cot = jnp.asarray(rng.normal(size=(1, 2, 2, 3, 2)), jnp.float32)

    def loss(im, bx):
        return jnp.sum(roi_ops.matmul_crop_and_resize(im, bx, (2, 3), 0.5, method=method) * cot)

    @jax.jit
    def check(im, bx):
        grads = jax.grad(loss, argnums=(0, 1))(im, bx)
        # linear in the image: central differences are exact up to rounding
        e_img = jnp.eye(im.size, dtype=im.dtype).reshape(im.size, *im.shape)
        fd_img = jax.vmap(lambda e: (loss(im + e, bx) - loss(im - e, bx)) / 2)(e_img)
        # piecewise-linear in the boxes (no sample sits on a pixel edge here)
        e_box = jnp.eye(bx.size, dtype=bx.dtype).reshape(bx.size, *bx.shape) * 1e-3
        fd_box = jax.vmap(lambda e: (loss(im, bx + e) - loss(im, bx - e)) / 2e-3)(e_box)
        return grads, fd_img, fd_box

    (g_img, g_box), fd_img, fd_box = check(img, boxes)
    assert np.all(np.isfinite(g_img)) and np.all(np.isfinite(g_box))
    assert np.abs(np.asarray(g_img)).sum() > 0
    np.testing.assert_allclose(np.asarray(g_img).ravel(), fd_img, atol=1e-4)
    np.testing.assert_allclose(np.asarray(g_box).ravel(), fd_box, rtol=2e-2, atol=2e-2)


def test_roi_align_gradients_agree_between_methods():
    rng = np.random.default_rng(2)
    feats = [jnp.asarray(rng.normal(size=(1, h, w, 2)), jnp.float32) for h, w in [(6, 5), (3, 3)]]
    boxes = jnp.asarray([[[0.1, 0.2, 0.8, 0.9], [-0.1, 0.3, 0.6, 1.1], [0.2, 0.2, 0.4, 0.5]]])
    levels = jnp.array([[0, 1, 1]])

    def loss(fs, method):
        out = roi_ops.multilevel_roi_align(fs, boxes, levels, (2, 2), 2, 2, False, 0.3,
                                           method=method)
        return jnp.sum(out * jnp.arange(out.size, dtype=out.dtype).reshape(out.shape))

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    for a, b in zip(grad(feats, "gather"), grad(feats, "matmul"), strict=True):
        assert np.all(np.isfinite(a)) and np.abs(np.asarray(a)).sum() > 0
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_vmap_over_images_equals_the_batched_call():
    rng = np.random.default_rng(3)
    img = jnp.asarray(rng.normal(size=(2, 5, 6, 3)), jnp.float32)
    boxes = jnp.asarray(rng.uniform(-0.1, 1.1, size=(2, 4, 4)), jnp.float32)
    batched = _crop(img, boxes, (3, 3))
    per = jax.jit(jax.vmap(
        lambda i, b: roi_ops.matmul_crop_and_resize(i[None], b[None], (3, 3))[0]))(img, boxes)
    np.testing.assert_allclose(per, batched, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_bfloat16_features_keep_their_dtype(method):
    img = jnp.arange(12.0, dtype=jnp.bfloat16).reshape(1, 3, 4, 1)
    boxes = jnp.array([[[0.0, 0.0, 1.0, 1.0]]])
    got = _crop(img, boxes, (3, 4), method=method)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32)[0, 0, ..., 0],
                               np.arange(12.0).reshape(3, 4), atol=0.1)


def test_bad_arguments_raise():
    img = jnp.zeros((1, 3, 4, 1))
    boxes = jnp.zeros((1, 2, 4))
    with pytest.raises(ValueError, match="method"):
        roi_ops.matmul_crop_and_resize(img, boxes, (2, 2), method="nope")
    with pytest.raises(ValueError, match="boxes"):
        roi_ops.matmul_crop_and_resize(img, jnp.zeros((2, 2, 4)), (2, 2))
    with pytest.raises(ValueError, match="box_levels"):
        roi_ops.multilevel_roi_align([img], boxes, jnp.zeros((1, 3), jnp.int32), (2, 2))
    with pytest.raises(ValueError, match="same B and C"):
        roi_ops.multilevel_roi_align([img, jnp.zeros((1, 2, 2, 2))], boxes, None, (2, 2))
    with pytest.raises(ValueError, match="unit_scale_index"):
        roi_ops.fpn_box_levels(boxes, 3, 3, 1.0)
