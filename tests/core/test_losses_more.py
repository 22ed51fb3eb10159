"""Bootstrapped sigmoid, L2, weighted sigmoid and scaled softmax against TF's formulas."""

import math

import numpy as np
import pytest

from jaxdet.core import losses
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss

P = 0.75
X = math.log(3.0)  # sigmoid(X) = 0.75


def _xent(target, p=P):
    return -target * math.log(p) - (1 - target) * math.log(1 - p)


@pytest.mark.parametrize("alpha", [0.5, 0.7])
def test_bootstrapped_sigmoid_soft_and_hard(run, alpha):
    logits = np.array([X, X], np.float32)
    targets = np.array([1.0, 0.0], np.float32)
    soft = run(losses.bootstrapped_sigmoid_loss, logits, targets, alpha=alpha)
    hard = run(losses.bootstrapped_sigmoid_loss, logits, targets, alpha=alpha, hard=True)
    # soft target alpha * t + (1 - alpha) * 0.75; hard: (1 - alpha) * 1 since 0.75 > 0.5
    np.testing.assert_allclose(
        soft, [_xent(alpha + (1 - alpha) * P), _xent((1 - alpha) * P)], rtol=1e-5)
    np.testing.assert_allclose(hard, [_xent(1.0), _xent(1 - alpha)], rtol=1e-5)


def test_l2_is_half_sum_of_squares(run):
    pred = np.array([[1.0, 2.0, 0.0, -1.0]], np.float32)
    np.testing.assert_allclose(run(losses.l2_loss, pred, np.zeros_like(pred)), [3.0])


def _targets():
    """B=1, A=2, C=2: anchor 0 positive (class 1), anchor 1 negative."""
    return {
        "cls_targets": np.array([[[0, 1], [0, 0]]], np.float32),
        "cls_weights": np.ones((1, 2), np.float32),
        "box_targets": np.array([[[1, 0, 0, 0], [0, 0, 0, 0]]], np.float32),
        "box_weights": np.array([[1, 0]], np.float32),
    }


def test_weighted_sigmoid_bootstrapped_and_l2_in_detection_loss(run):
    logits = np.full((1, 2, 2), X, np.float32)
    enc = np.array([[[3, 0, 0, 1], [9, 9, 9, 9]]], np.float32)
    params = DetectionLossParams(classification="weighted_sigmoid", localization="l2")
    _, parts = run(detection_loss, logits, enc, _targets(), params=params)
    np.testing.assert_allclose(parts["classification_loss"], 3 * _xent(0) + _xent(1), rtol=1e-5)
    np.testing.assert_allclose(parts["localization_loss"], 0.5 * (4 + 1), rtol=1e-6)

    params = DetectionLossParams(classification="bootstrapped_sigmoid", bootstrap_alpha=0.5,
                                 hard_bootstrap=True)
    _, parts = run(detection_loss, logits, enc, _targets(), params=params)
    # hard targets 0.5 * t + 0.5: three entries 0.5, one 1.0
    np.testing.assert_allclose(parts["classification_loss"], 3 * _xent(0.5) + _xent(1.0),
                               rtol=1e-5)


def test_softmax_divides_logits_by_logit_scale(run):
    logits = np.array([[[0, 0, 4], [2, 0, 0]]], np.float32)  # K = 3 with background
    params = DetectionLossParams(classification="softmax", add_background_class=True,
                                 logit_scale=2.0)
    _, parts = run(detection_loss, logits, np.zeros((1, 2, 4), np.float32), _targets(),
                   params=params)
    # anchor 0: target class 1 (column 2), logits/2 = [0, 0, 2]; anchor 1: background, [1, 0, 0]
    expected = -math.log(math.e**2 / (2 + math.e**2)) - math.log(math.e / (math.e + 2))
    np.testing.assert_allclose(parts["classification_loss"], expected, rtol=1e-5)


def test_builder_refuses_softmax_without_background(tiny_config):
    model = tiny_config.model.model_copy(update={
        "loss": tiny_config.model.loss.model_copy(update={"classification": "softmax"}),
        "add_background_class": False,
    })
    with pytest.raises(ValueError, match="add_background_class=true"):
        ssd_build.build_loss_params(model)
    model = model.model_copy(update={"add_background_class": True})
    assert ssd_build.build_loss_params(model).classification == "softmax"
