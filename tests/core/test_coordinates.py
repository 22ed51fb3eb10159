"""to_original_coordinates on hand-computed boxes, numpy and jax (eager and jitted)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core.coordinates import to_original_coordinates

INPUT_SIZE = (128, 128)
# image 0: fixed-shape resize of a 64 x 32 (h x w) image: content fills the 128 x 128 input.
# image 1: keep-aspect-ratio 480 x 640 -> 96 x 128 content, padded below to 128 x 128.
IMAGE_INFO = np.array([[64, 32, 128, 128], [480, 640, 96, 128]], np.float32)
BOXES = np.array(
    [
        [[0.25, 0.5, 0.5, 1.0], [-0.1, 0.0, 1.2, 0.5]],
        [[0.25, 0.5, 0.5, 0.75], [0.5, -0.1, 0.9, 0.25]],
    ],
    np.float32,
)
EXPECTED = np.array(
    [
        # y * 128 * 64 / 128 = y * 64 ; x * 128 * 32 / 128 = x * 32
        [[16, 16, 32, 32], [0, 0, 64, 16]],  # second box clipped to [0, 64] x [0, 32]
        # y * 128 * 480 / 96 = y * 640 ; x * 128 * 640 / 128 = x * 640
        [[160, 320, 320, 480], [320, 0, 480, 160]],  # 0.9 * 640 = 576 clipped to 480
    ],
    np.float32,
)


def test_numpy():
    out = to_original_coordinates(BOXES, IMAGE_INFO, INPUT_SIZE)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, EXPECTED, rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_jax(jit):
    fn = lambda b, i: to_original_coordinates(b, i, INPUT_SIZE)
    if jit:
        fn = jax.jit(fn)
    out = fn(jnp.asarray(BOXES), jnp.asarray(IMAGE_INFO))
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), EXPECTED, rtol=1e-6)


def test_non_square_input_and_padding_rows():
    # input 64 x 128 (h x w); a 300 x 900 image resized to 43 x 128 (keep aspect ratio)
    boxes = np.array([[[0.5, 0.5, 0.6, 1.0]], [[0.5, 0.5, 0.6, 1.0]]], np.float64)
    info = np.array([[300, 900, 43, 128], [0, 0, 0, 0]])  # second row: eval padding
    out = to_original_coordinates(boxes, info, (64, 128))
    np.testing.assert_allclose(
        out[0, 0], [0.5 * 64 * 300 / 43, 0.5 * 128 * 900 / 128, min(0.6 * 64 * 300 / 43, 300), 900]
    )
    assert np.isfinite(out).all()


def test_shape_errors():
    with pytest.raises(ValueError, match="image_info"):
        to_original_coordinates(BOXES, IMAGE_INFO[:1], INPUT_SIZE)
