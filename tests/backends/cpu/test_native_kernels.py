"""jaxdet's XLA:CPU kernels (``backends.cpu.kernels``, ``native/cpu_kernels.cc``) compute what
their jnp twins compute, in float64 by hand where that is simple; the models use them on one
device only (convolutions in train steps, NMS's per-class top k in predict), never in an
export, and fall back to jnp when they are turned off or cannot be built."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxdet.backends import trace
from jaxdet.backends.cpu import conv2d as depthwise
from jaxdet.backends.cpu import kernels as cpu_kernels
from jaxdet.backends.cpu import winograd
from jaxdet.backends.dispatch import top_k_per_class
from jaxdet.core import portable
from jaxdet.core.nms import batched_nms
from jaxdet.models.thin_maps import mesh_scope

pytestmark = [
    pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU kernels"),
    pytest.mark.skipif(not cpu_kernels.available(), reason="no C++ compiler to build them"),
]

DN = ("NHWC", "HWIO", "NHWC")


def _rng_normal(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _padded_taps64(x, kh, kw, strides, padding, out_hw):
    """The float64 [kh * kw, B, Ho, Wo, C] windows of x (zero padding), by numpy slicing."""
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), padding[0], padding[1], (0, 0)))
    (sh, sw), (ho, wo) = strides, out_hw
    return np.stack([xp[:, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw]
                     for i in range(kh) for j in range(kw)])


@pytest.mark.parametrize("shape, kernel, stride, padding", [
    ((2, 9, 11, 20), (3, 3), 1, ((1, 1), (1, 1))),   # 20 channels: one vector and a tail
    ((2, 8, 8, 70), (3, 3), 2, ((0, 1), (0, 1))),    # TF SAME at stride 2, 4 vectors + tail
    ((1, 7, 10, 3), (5, 5), 2, ((2, 2), (2, 2))),
    ((3, 6, 6, 16), (3, 3), 3, ((2, 0), (1, 2))),    # asymmetric padding, stride 3
])
def test_depthwise_kernel_gradient_is_the_sum_of_tap_products(shape, kernel, stride, padding):
    x = _rng_normal(0, shape)
    kh, kw = kernel
    ho = (shape[1] + sum(padding[0]) - kh) // stride + 1
    wo = (shape[2] + sum(padding[1]) - kw) // stride + 1
    grad = _rng_normal(1, (shape[0], ho, wo, shape[3]))
    taps = _padded_taps64(x, kh, kw, (stride, stride), padding, (ho, wo))
    want = np.einsum("tbhwc,bhwc->tc", taps, np.asarray(grad, np.float64)).reshape(
        kh, kw, 1, shape[3])
    fn = lambda x, g: cpu_kernels.depthwise_kernel_gradient(  # noqa: E731
        x, g, kernel, (stride, stride), padding)
    for call in (fn, jax.jit(fn)):
        np.testing.assert_allclose(call(x, grad), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n, c, o", [(3000, 16, 96), (37, 5, 21), (1100, 70, 33), (8, 1, 1)])
def test_transposed_left_product_is_x_transpose_times_grad(n, c, o):
    x, g = _rng_normal(0, (n, c)), _rng_normal(1, (n, o))
    want = np.asarray(x, np.float64).T @ np.asarray(g, np.float64)
    np.testing.assert_allclose(cpu_kernels.matmul_transposed_left(x, g), want, rtol=1e-5,
                               atol=1e-4)
    # a batch of products (Winograd's 36): each one its own
    xb, gb = jnp.stack([x, 2 * x, -x]), jnp.stack([g, g, 3 * g])
    got = jax.jit(cpu_kernels.matmul_transposed_left)(xb, gb)
    for b, factor in enumerate((1.0, 2.0, -3.0)):
        np.testing.assert_allclose(got[b], factor * want, rtol=1e-5, atol=1e-4)


def test_a_1x1_kernel_gradient_leaves_its_output_gradient_computed_once():
    """The output gradient of a large 1x1 convolution feeds two products, the input gradient
    (XLA's dot) and the kernel gradient (the kernel): both must read it at one shape, or XLA
    computes its elementwise producer (here the cosine of ``d sin(y)``) once per shape."""
    x, k = _rng_normal(0, (2, 64, 64, 8)), _rng_normal(1, (1, 1, 8, 24))

    def loss(x, k):
        return jnp.sum(jnp.sin(depthwise.conv_general_dilated(x, k, (1, 1), "VALID",
                                                               dimension_numbers=DN)))

    hlo = jax.jit(jax.grad(loss, (0, 1))).lower(x, k).compile().as_text()
    assert "jaxdet_matmul_transposed_left_matrix" in hlo
    computations = hlo.split("\n\n")
    assert sum("cosine(" in c for c in computations) == 1, "the output gradient is duplicated"


@pytest.mark.parametrize("shape, kernel, out_channels, stride, padding", [
    ((2, 30, 30, 3), (3, 3), 32, 2, ((0, 1), (0, 1))),  # MobileNet / EfficientNet stems
    ((1, 20, 22, 3), (7, 7), 20, 2, ((3, 3), (3, 3))),  # ResNet stem (tail of the vector)
    ((2, 9, 7, 4), (3, 3), 21, 1, ((1, 1), (1, 1))),
    ((1, 5, 6, 1), (2, 3), 5, 2, ((1, 0), (2, 1))),
])
def test_image_convolution_and_its_kernel_gradient_match_lax(shape, kernel, out_channels,
                                                             stride, padding):
    x = _rng_normal(0, shape)
    k = _rng_normal(1, (*kernel, shape[3], out_channels))
    strides = (stride, stride)
    want = lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=DN,
                                    precision="highest")
    got = jax.jit(lambda x, k: cpu_kernels.image_convolution(x, k, strides, padding))(x, k)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    grad = _rng_normal(2, want.shape)
    taps = _padded_taps64(x, *kernel, strides, padding, want.shape[1:3])
    want_k = np.einsum("tbhwc,bhwo->tco", taps, np.asarray(grad, np.float64)).reshape(k.shape)
    got_k = cpu_kernels.image_convolution_kernel_gradient(x, grad, kernel, strides, padding)
    np.testing.assert_allclose(got_k, want_k, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("shape", [(2, 9, 7, 20), (1, 8, 8, 16), (1, 3, 13, 5)])
def test_winograd_tiles_are_the_jnp_transforms(shape):
    x = _rng_normal(0, shape)
    v, nh, nw = winograd._transform_input(x)
    got = cpu_kernels.winograd_input_tiles(x).reshape(v.shape)
    np.testing.assert_allclose(got, v, rtol=1e-5, atol=1e-4)
    want = winograd._transform_output_gradient(x, nh, nw)  # [6, 6, O, B, nh, nw]
    got = cpu_kernels.winograd_output_gradient_tiles(x).reshape(
        6, 6, shape[0], nh, nw, shape[3]).transpose(0, 1, 5, 2, 3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _conv_loss(conv, **kw):
    def loss(x, k):
        return jnp.sum(jnp.sin(conv(x, k, **kw)))
    return loss


@pytest.mark.parametrize("case", ["depthwise", "pointwise", "stem3x3", "stem7x7", "winograd"])
def test_model_convolutions_give_the_same_gradients_with_and_without_the_kernels(case):
    """The router (backends.cpu.conv2d.conv_general_dilated) in a train step: values and both
    gradients equal with the kernels and with the portable jnp paths, and lax's."""
    shapes = {"depthwise": ((2, 40, 30, 24), (3, 3, 1, 24), 2, 24),
              "pointwise": ((2, 64, 70, 16), (1, 1, 16, 40), 1, 1),
              "stem3x3": ((2, 33, 31, 3), (3, 3, 3, 32), 2, 1),
              "stem7x7": ((1, 40, 36, 3), (7, 7, 3, 64), 2, 1),
              "winograd": ((2, 24, 28, 64), (3, 3, 64, 64), 1, 1)}
    x_shape, k_shape, stride, groups = shapes[case]
    x, k = _rng_normal(0, x_shape), 0.1 * _rng_normal(1, k_shape)
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    kw = {"window_strides": (stride, stride), "padding": "SAME", "dimension_numbers": dn,
          "feature_group_count": groups}
    ours = _conv_loss(depthwise.conv_general_dilated, **kw)
    ref = _conv_loss(lax.conv_general_dilated, **{**kw, "dimension_numbers": DN,
                                                 "precision": "highest"})
    want = jax.jit(jax.value_and_grad(ref, (0, 1)))(x, k)
    with_kernels = jax.jit(jax.value_and_grad(ours, (0, 1))).lower(x, k)
    assert "jaxdet_" in with_kernels.as_text()  # the kernels are in the compiled step
    got = with_kernels.compile()(x, k)
    with trace.portable():
        portable = jax.jit(jax.value_and_grad(ours, (0, 1))).lower(x, k)
    assert "jaxdet_" not in portable.as_text()
    for result in (got, portable.compile()(x, k)):
        np.testing.assert_allclose(result[0], want[0], rtol=1e-4)
        for a, b in zip(result[1], want[1], strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * float(jnp.abs(b).max()))


def test_undifferentiated_calls_never_use_the_kernels():
    """predict and export trace the primal function: no custom call in their HLO."""
    x = _rng_normal(0, (1, 32, 32, 3))
    k = _rng_normal(1, (3, 3, 3, 16))
    dn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    fn = jax.jit(lambda x, k: depthwise.conv_general_dilated(x, k, (2, 2), "SAME",
                                                              dimension_numbers=dn))
    assert "jaxdet_" not in fn.lower(x, k).as_text()


_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1.0, 1.0,
                     3e38, -2.5], np.float32)


@pytest.mark.parametrize("shape, k", [
    ((2, 300, 7), 1), ((2, 300, 7), 17), ((2, 300, 7), 300),  # k = n: the whole row sorted
    ((1, 5000, 33), 1000),  # three blocks of rows (16, 16, 1), more candidates than k
    ((3, 64, 1), 10),       # one row per image (class-agnostic scores)
])
def test_top_k_along_axis_is_lax_top_k_of_the_transposed_rows(shape, k):
    """Bit-equal values and equal indices: NaNs of both signs, infinities, signed zeros,
    denormals, ties (lower position first), a constant row (every key in one histogram bin)."""
    rng = np.random.default_rng(k)
    x = rng.choice(_SPECIAL, size=shape).astype(np.float32)
    x[..., 0] = rng.normal(size=shape[:2])
    if shape[2] > 2:
        x[..., 1] = 0.25  # all ties
        x[..., 2] = np.round(rng.normal(size=shape[:2]) * 2) / 2  # few distinct values
    values, indices = jax.jit(lambda x: cpu_kernels.top_k_along_axis(x, k))(x)
    want_values, want_indices = lax.top_k(jnp.swapaxes(jnp.asarray(x), 1, 2), k)
    assert values.shape == indices.shape == (shape[0], shape[2], k)
    np.testing.assert_array_equal(np.asarray(values).view(np.uint32),
                                  np.asarray(want_values).view(np.uint32))
    np.testing.assert_array_equal(indices, want_indices)
    with pytest.raises(ValueError, match="must be in 1..300"):
        cpu_kernels.top_k_along_axis(jnp.zeros((1, 300, 2)), 301)


def test_nms_top_k_uses_the_kernel_in_predict_only_and_detects_the_same():
    """batched_nms on one CPU device calls the top-k kernel; turned off, and traced for an
    export, it does not; the detections are equal."""
    rng = np.random.default_rng(0)
    centers = rng.uniform(0.1, 0.9, size=(2, 700, 2))
    boxes = jnp.asarray(np.concatenate([centers - 0.05, centers + 0.05], -1), jnp.float32)
    scores = jnp.asarray(rng.uniform(size=(2, 700, 6)), jnp.float32)
    nms = dict(score_threshold=0.05, iou_threshold=0.5, max_detections_per_class=20,
               max_total_detections=50, pre_nms_top_k=100)

    def lowered():
        return jax.jit(portable.fresh_trace(lambda b, s: batched_nms(b, s, **nms))).lower(
            boxes, scores)

    with_kernel = lowered()
    assert "jaxdet_top_k" in with_kernel.as_text()
    with trace.portable():
        portable_nms = lowered()
    with portable.exportable(pooling_as_slices=False, row_as_sum=False, nms_as_op=False):
        exported = lowered()
    assert "jaxdet_" not in portable_nms.as_text() and "jaxdet_" not in exported.as_text()
    got, want = with_kernel.compile()(boxes, scores), portable_nms.compile()(boxes, scores)
    assert int(want["num_detections"].sum()) > 20
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_nms_top_k_kernel_differentiates_as_lax_top_k():
    """The kept scores' gradient flows to the anchors they came from, as through lax.top_k."""
    scores = _rng_normal(4, (2, 300, 5))
    weights = _rng_normal(5, (2, 5, 40))

    def loss(s):
        values, _ = top_k_per_class(s, 40)
        return jnp.sum(jnp.tanh(values) * weights)

    with_kernel = jax.jit(portable.fresh_trace(jax.grad(loss))).lower(scores)
    assert "jaxdet_top_k" in with_kernel.as_text()
    with trace.portable():
        want = jax.jit(portable.fresh_trace(jax.grad(loss)))(scores)
    np.testing.assert_array_equal(with_kernel.compile()(scores), want)
    assert int(jnp.sum(want != 0)) == 2 * 5 * 40


def test_not_used_on_a_mesh_of_several_devices():
    """XLA cannot partition a custom call: a step traced for a mesh takes the jnp paths."""
    assert cpu_kernels.usable()
    devices = np.array(jax.devices()[:2])
    if devices.size < 2:
        pytest.skip("needs two (emulated) devices")
    with mesh_scope(jax.sharding.Mesh(devices, ("data",))):
        assert not cpu_kernels.usable()
    with trace.portable():
        assert not cpu_kernels.usable()
    assert cpu_kernels.usable()


@pytest.mark.slow
def test_build_failure_is_none_and_opt_out_turns_them_off(tmp_path):
    assert cpu_kernels.library(tmp_path, compiler=str(tmp_path / "no-such-c++")) is None
    assert cpu_kernels.library(tmp_path, source=tmp_path / "absent.cc") is None
    assert list(tmp_path.iterdir()) == []  # no partial file left behind
    code = ("import jax; jax.config.update('jax_platforms', 'cpu'); "
            "from jaxdet.backends.cpu import kernels; print(kernels.available())")
    env = {**os.environ, cpu_kernels.OPT_OUT: "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.slow
def test_the_library_is_built_once_per_source_and_machine(tmp_path):
    first = cpu_kernels.library(tmp_path)
    assert first is not None and first.is_file()
    stamp = first.stat().st_mtime_ns
    assert cpu_kernels.library(tmp_path) == first
    assert first.stat().st_mtime_ns == stamp  # found, not rebuilt
