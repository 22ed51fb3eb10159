import math

import numpy as np
import pytest

from jaxdet.core.box_coders import FasterRcnnBoxCoder, MeanStddevBoxCoder

ANCHORS = np.array([[0.0, 0.0, 1.0, 1.0], [0.2, 0.3, 0.6, 0.5]], np.float32)
BOXES = np.array([[0.0, 0.5, 2.0, 1.5], [0.1, 0.2, 0.7, 0.9]], np.float32)


def test_faster_rcnn_hand_computed_code(run):
    # Anchor center (0.5, 0.5), size 1x1; box center (1, 1), size 2x1.
    codes = run(FasterRcnnBoxCoder().encode, BOXES[:1], ANCHORS[:1])
    np.testing.assert_allclose(codes, [[5.0, 5.0, 5 * math.log(2.0), 0.0]], rtol=1e-6, atol=1e-6)
    codes = run(FasterRcnnBoxCoder(scales=None).encode, BOXES[:1], ANCHORS[:1])
    np.testing.assert_allclose(codes, [[0.5, 0.5, math.log(2.0), 0.0]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "coder", [FasterRcnnBoxCoder(), FasterRcnnBoxCoder(scales=None), MeanStddevBoxCoder()]
)
def test_round_trip(run, coder):
    codes = run(coder.encode, BOXES, ANCHORS)
    assert codes.shape == (2, coder.code_size)
    np.testing.assert_allclose(run(coder.decode, codes, ANCHORS), BOXES, atol=1e-5)


def test_broadcast_over_batch(run):
    coder = FasterRcnnBoxCoder()
    batch = np.stack([BOXES, BOXES[::-1]])  # [2, 2, 4] against anchors [2, 4]
    codes = run(coder.encode, batch, ANCHORS)
    assert codes.shape == (2, 2, 4)
    np.testing.assert_allclose(run(coder.decode, codes, ANCHORS), batch, atol=1e-5)


def test_decode_clamps_the_log_scales_as_torchvision(run):
    # anchor 1x1 at (0.5, 0.5); th = 10 (after scale 2: 5) is clamped to log(1000 / 16)
    clip = math.log(1000.0 / 16)
    coder = FasterRcnnBoxCoder(scales=(1.0, 1.0, 2.0, 1.0), max_log_scale=clip)
    boxes = run(coder.decode, np.array([[0.5, 0.0, 10.0, -1.0]], np.float32), ANCHORS[:1])
    h, w = 1000.0 / 16, math.exp(-1.0)  # only the upper bound is clamped
    np.testing.assert_allclose(boxes, [[1.0 - h / 2, 0.5 - w / 2, 1.0 + h / 2, 0.5 + w / 2]],
                               rtol=1e-5)
    # the clamp leaves codes below it alone (the round trip of the default coder holds)
    codes = run(coder.encode, BOXES, ANCHORS)
    np.testing.assert_allclose(run(coder.decode, codes, ANCHORS), BOXES, atol=1e-5)


def test_mean_stddev_hand_computed(run):
    codes = run(MeanStddevBoxCoder(stddev=0.1).encode, BOXES[1:], ANCHORS[1:])
    np.testing.assert_allclose(codes, [[-1.0, -1.0, 1.0, 4.0]], rtol=1e-5)


def test_coders_are_hashable():
    assert hash(FasterRcnnBoxCoder()) == hash(FasterRcnnBoxCoder((10.0, 10.0, 5.0, 5.0)))
    assert FasterRcnnBoxCoder().code_size == MeanStddevBoxCoder().code_size == 4
