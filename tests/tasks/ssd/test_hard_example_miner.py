"""Hard example mining (TF HardExampleMiner): hand-computed masks and mined losses."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.tasks.ssd.hard_example_miner import HardExampleMinerParams, hard_example_mask
from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss

# a0 and a1 overlap with IoU 0.9; a2, a3 stand alone.
BOXES = np.array([[0, 0, 1, 1], [0, 0, 1, 0.9], [2, 2, 3, 3], [4, 4, 5, 5]], np.float32)
CLS = np.array([3.0, 5.0, 1.0, 2.0], np.float32)
LOC = np.array([0.5, 0.0, 0.0, 0.0], np.float32)
POS = np.array([True, False, False, False])
NEG = ~POS


def _mask(run, **kw):
    weights = {k: kw.pop(k) for k in ("classification_weight", "localization_weight") if k in kw}
    params = HardExampleMinerParams(**kw)
    return run(hard_example_mask, CLS, LOC, BOXES, POS, NEG, params=params, **weights)


@pytest.mark.parametrize(
    "kw, expected, counts",
    [
        # NMS by cls loss: a1 (5) suppresses a0 (IoU 0.9 > 0.7), then a3 (2), a2 (1).
        (dict(num_hard_examples=3, loss_type="classification"), [0, 1, 1, 1], (0, 3)),
        (dict(num_hard_examples=2, loss_type="classification"), [0, 1, 0, 1], (0, 2)),
        # no NMS overlap at 0.95: a1, a0, a3.
        (dict(num_hard_examples=3, loss_type="classification", iou_threshold=0.95),
         [1, 1, 0, 1], (1, 2)),
        # a cap of 1 negative per positive, no positive selected: no negative either ...
        (dict(num_hard_examples=3, loss_type="classification", max_negatives_per_positive=1),
         [0, 0, 0, 0], (0, 0)),
        # ... unless min_negatives_per_image: the first two selected (a1, a3).
        (dict(num_hard_examples=3, loss_type="classification", max_negatives_per_positive=1,
              min_negatives_per_image=2), [0, 1, 0, 1], (0, 2)),
        # both: 1 * cls + 10 * loc -> a0 8, a1 5, a3 2, a2 1; a0 suppresses a1; cap 1 -> a3.
        (dict(num_hard_examples=3, loss_type="both", max_negatives_per_positive=1,
              localization_weight=10.0), [1, 0, 0, 1], (1, 1)),
        # loc: a0 0.5 first (suppresses a1), then the zero-loss tie a2 (lowest index).
        (dict(num_hard_examples=2, loss_type="localization"), [1, 0, 1, 0], (1, 1)),
        # 0 = no limit on the number of hard examples.
        (dict(num_hard_examples=0, loss_type="classification"), [0, 1, 1, 1], (0, 3)),
    ],
)
def test_mask_by_hand(run, kw, expected, counts):
    mask, num_pos, num_neg = _mask(run, **kw)
    np.testing.assert_array_equal(mask, expected)
    assert (float(num_pos), float(num_neg)) == counts


def _softplus(x):
    return math.log1p(math.exp(x))


ANCHORS = BOXES
LOGITS = np.array([[[0.0], [3.0], [-1.0], [1.0]]], np.float32)  # B=1, A=4, C=1
# cls losses: a0 (target 1) log 2; negatives softplus(3), softplus(-1), softplus(1)
CLS_LOSS = [math.log(2.0), _softplus(3.0), _softplus(-1.0), _softplus(1.0)]
TARGETS = {
    "cls_targets": np.array([[[1.0], [0.0], [0.0], [0.0]]], np.float32),
    "cls_weights": np.ones((1, 4), np.float32),
    "box_targets": np.zeros((1, 4, 4), np.float32),
    "box_weights": np.array([[1.0, 0, 0, 0]], np.float32),
    "match": np.array([[0, -1, -1, -1]], np.int32),
}
# a0's predicted code ty=1 moves its box to [0.1, 0, 1.1, 1]: IoU with a1 = 0.81/1.09 = 0.74.
ENCODINGS = np.zeros((1, 4, 4), np.float32)
ENCODINGS[0, 0, 0] = 1.0  # smooth L1 of 1 -> loc loss 0.5


def _loss(run, **miner):
    params = DetectionLossParams(classification="weighted_sigmoid",
                                 hard_example_miner=HardExampleMinerParams(**miner))
    return run(detection_loss, LOGITS, ENCODINGS, TARGETS, params=params,
               anchors=ANCHORS, box_coder=FasterRcnnBoxCoder())


@pytest.mark.slow
def test_mined_loss_by_hand(run):
    # both: a0 log2 + 0.5 = 1.19, a1 3.05, a2 0.31, a3 1.31 -> a1 (suppresses a0), a3.
    total, parts = _loss(run, num_hard_examples=2, loss_type="both")
    np.testing.assert_allclose(parts["classification_loss"], CLS_LOSS[1] + CLS_LOSS[3],
                               rtol=1e-5)
    np.testing.assert_allclose(parts["localization_loss"], 0.0, atol=1e-7)
    assert float(parts["num_positives"]) == 1.0  # normalizer: all positives, not mined ones
    assert (float(parts["mined_positives"]), float(parts["mined_negatives"])) == (0.0, 2.0)
    # iou 0.8: no suppression -> a1, a3, a0; a0's loc loss counts.
    _, parts = _loss(run, num_hard_examples=3, loss_type="both", iou_threshold=0.8)
    np.testing.assert_allclose(parts["classification_loss"],
                               CLS_LOSS[0] + CLS_LOSS[1] + CLS_LOSS[3], rtol=1e-5)
    np.testing.assert_allclose(parts["localization_loss"], 0.5, rtol=1e-6)
    # cap: max(1, 1 * 0 positives) negatives -> a1 only.
    _, parts = _loss(run, num_hard_examples=2, loss_type="both", max_negatives_per_positive=1,
                     min_negatives_per_image=1)
    np.testing.assert_allclose(parts["classification_loss"], CLS_LOSS[1], rtol=1e-5)


def test_gradient_only_through_mined_anchors():
    params = DetectionLossParams(
        classification="weighted_sigmoid",
        hard_example_miner=HardExampleMinerParams(num_hard_examples=2, loss_type="both"))

    def f(logits, enc):
        return detection_loss(logits, enc, TARGETS, params, anchors=jnp.asarray(ANCHORS),
                              box_coder=FasterRcnnBoxCoder())[0]

    g_logits, g_enc = jax.jit(jax.grad(f, argnums=(0, 1)))(LOGITS, ENCODINGS)
    g_logits = np.asarray(g_logits)[0, :, 0]
    assert np.all(np.isfinite(g_logits)) and np.all(np.isfinite(np.asarray(g_enc)))
    np.testing.assert_array_equal(g_logits[[0, 2]], 0.0)  # not mined
    np.testing.assert_allclose(g_logits[[1, 3]], 1 / (1 + np.exp(-LOGITS[0, [1, 3], 0])),
                               rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(g_enc), 0.0)  # the positive was suppressed


def test_params_validation():
    with pytest.raises(ValueError, match="loss_type"):
        HardExampleMinerParams(loss_type="cls")
    with pytest.raises(ValueError, match="anchors="):
        detection_loss(LOGITS, ENCODINGS, TARGETS, DetectionLossParams(
            hard_example_miner=HardExampleMinerParams()))
