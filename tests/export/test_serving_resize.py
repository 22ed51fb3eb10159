"""The artifact's in-graph ``bilinear`` resize is ``jax.image.resize``'s antialiased linear
resize written as two matmuls, which ONNX takes (jax2onnx has no antialiased resize)."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.export.serving import resize


@pytest.mark.parametrize("shape", [(80, 60), (200, 150), (133, 50)])
def test_bilinear_resize_equals_jax_image_resize(shape):
    x = jnp.asarray(np.random.default_rng(0).uniform(0, 255, (2, 133, 101, 3)), jnp.float32)
    want = jax.image.resize(x, (2, *shape, 3), "linear", antialias=True)
    got = jax.jit(lambda x: resize(x, *shape, "bilinear"))(x)
    np.testing.assert_allclose(got, want, atol=5e-3)  # 0..255 values: float32 rounding


@pytest.mark.skipif(importlib.util.find_spec("jax2onnx") is None
                    or importlib.util.find_spec("onnxruntime") is None,
                    reason="ONNX export needs `make install-export`")
@pytest.mark.slow
def test_bilinear_resize_converts_to_onnx():
    import onnxruntime as ort
    from jax2onnx import to_onnx

    x = np.random.default_rng(1).uniform(0, 255, (1, 40, 30, 3)).astype(np.float32)
    model = to_onnx(lambda x: resize(x, 24, 36, "bilinear"),
                    [jax.ShapeDtypeStruct(x.shape, np.float32)], input_names=["x"],
                    return_mode="proto")
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = jax.image.resize(x, (1, 24, 36, 3), "linear", antialias=True)
    np.testing.assert_allclose(got, want, atol=5e-3)
