import math

import numpy as np

from jaxdet.core import losses


def _f32(*values):
    return np.array(values, np.float32)


def test_sigmoid_focal_loss_single_logits_by_hand(run):
    logits = _f32([0.0, 2.0])
    targets = _f32([1.0, 0.0])
    # x=0, t=1: p_t = 0.5, ce = log 2 -> 0.25 * 0.5**2 * log 2.
    # x=2, t=0: p = s(2), p_t = 1 - p, ce = log(1 + e**2) -> 0.75 * p**2 * ce.
    p = 1.0 / (1.0 + math.exp(-2.0))
    expected = [[0.25 * 0.25 * math.log(2.0), 0.75 * p**2 * math.log(1.0 + math.exp(2.0))]]
    np.testing.assert_allclose(run(losses.sigmoid_focal_loss, logits, targets), expected, rtol=1e-6)
    no_alpha = run(losses.sigmoid_focal_loss, logits, targets, alpha=None)
    np.testing.assert_allclose(no_alpha[0, 0], 0.25 * math.log(2.0), rtol=1e-6)
    # gamma=0, alpha=None is plain sigmoid cross-entropy.
    plain = run(losses.sigmoid_focal_loss, logits, targets, alpha=None, gamma=0.0)
    np.testing.assert_allclose(plain, run(losses.weighted_sigmoid_loss, logits, targets), rtol=1e-6)


def test_weighted_sigmoid_loss_by_hand_and_stable(run):
    logits = _f32([0.0, 100.0, -100.0, 100.0])
    targets = _f32([1.0, 1.0, 1.0, 0.0])
    out = run(losses.weighted_sigmoid_loss, logits, targets)
    np.testing.assert_allclose(out, [[math.log(2.0), 0.0, 100.0, 100.0]], rtol=1e-6, atol=1e-6)


def test_softmax_cross_entropy_loss(run):
    logits = _f32([0.0, math.log(3.0)], [0.0, 0.0])
    targets = _f32([0.0, 1.0], [0.5, 0.5])
    out = run(losses.softmax_cross_entropy_loss, logits, targets)
    np.testing.assert_allclose(out, [-math.log(0.75), math.log(2.0)], rtol=1e-6)
    scaled = run(losses.softmax_cross_entropy_loss, logits, targets, logit_scale=2.0)
    s3 = math.sqrt(3.0)
    np.testing.assert_allclose(scaled[0], -math.log(s3 / (1.0 + s3)), rtol=1e-6)


def test_smooth_l1_and_l1(run):
    pred = np.zeros((1, 3), np.float32)
    target = _f32([0.5, 2.0, -3.0])
    # delta 1: 0.5 * 0.25 + (2 - 0.5) + (3 - 0.5); delta 2: 0.125 + 0.5 * 4 + 2 * (3 - 1).
    np.testing.assert_allclose(run(losses.smooth_l1_loss, pred, target), [4.125], rtol=1e-6)
    np.testing.assert_allclose(
        run(losses.smooth_l1_loss, pred, target, delta=2.0), [6.125], rtol=1e-6
    )
    np.testing.assert_allclose(run(losses.l1_loss, pred, target), [5.5], rtol=1e-6)


def test_giou_loss(run):
    a = _f32([0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0])
    b = _f32([0.0, 0.0, 1.0, 1.0], [0.0, 2.0, 1.0, 3.0])
    np.testing.assert_allclose(run(losses.giou_loss, a, b), [0.0, 4.0 / 3.0], rtol=1e-6)
