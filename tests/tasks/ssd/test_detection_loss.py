import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss

LOG2, LOG3 = math.log(2.0), math.log(3.0)
ANCHORS = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]], np.float32)


def _targets(box_targets=None):
    """B=2, A=3, C=2: one positive per image; image 0's anchor 2 is ignored (weight 0)."""
    if box_targets is None:
        box_targets = np.zeros((2, 3, 4), np.float32)
        box_targets[0, 0, 0] = 1.0
        box_targets[1, 0, 3] = 2.0
    return {
        "cls_targets": np.array([[[1, 0], [0, 0], [0, 1]], [[0, 1], [0, 0], [0, 0]]], np.float32),
        "cls_weights": np.array([[1, 1, 0], [1, 1, 1]], np.float32),
        "box_targets": box_targets,
        "box_weights": np.array([[1, 0, 0], [1, 0, 0]], np.float32),
    }


def _box_encodings():
    enc = np.full((2, 3, 4), 100.0, np.float32)  # non-positives: must not count
    enc[:, 0] = 0.0
    return enc


def test_focal_smooth_l1_by_hand(run):
    params = DetectionLossParams(classification_weight=2.0, localization_weight=3.0)
    logits = np.zeros((2, 3, 2), np.float32)
    total, parts = run(detection_loss, logits, _box_encodings(), _targets(), params=params)
    # Per entry at logit 0: positive 0.25 * 0.25 * log 2, negative 0.75 * 0.25 * log 2.
    a, b = 0.0625 * LOG2, 0.1875 * LOG2
    cls = 2.0 * ((a + b) + 2 * b + (a + b) + 2 * b + 2 * b) / 2.0
    loc = 3.0 * (0.5 * 1.0**2 + (2.0 - 0.5)) / 2.0  # Huber of 1 and of 2, over 2 positives
    np.testing.assert_allclose(parts["classification_loss"], cls, rtol=1e-6)
    np.testing.assert_allclose(parts["localization_loss"], loc, rtol=1e-6)
    np.testing.assert_allclose(total, cls + loc, rtol=1e-6)
    assert float(parts["num_positives"]) == 2.0


def test_softmax_with_background_and_l1(run):
    params = DetectionLossParams(
        classification="softmax", add_background_class=True, localization="l1"
    )
    logits = np.zeros((2, 3, 3), np.float32)  # K = C + 1
    _, parts = run(detection_loss, logits, _box_encodings(), _targets(), params=params)
    np.testing.assert_allclose(parts["classification_loss"], 5 * LOG3 / 2, rtol=1e-6)
    np.testing.assert_allclose(parts["localization_loss"], (1.0 + 2.0) / 2, rtol=1e-6)


def test_normalization_without_positives(run):
    targets = _targets()
    targets["box_weights"] = np.zeros((2, 3), np.float32)
    logits = np.zeros((2, 3, 2), np.float32)
    ps = [
        DetectionLossParams(classification="weighted_sigmoid", normalize_by_num_matches=n)
        for n in (True, False)
    ]
    by_matches = run(detection_loss, logits, _box_encodings(), targets, params=ps[0])[0]
    by_batch = run(detection_loss, logits, _box_encodings(), targets, params=ps[1])[0]
    np.testing.assert_allclose(by_matches, 5 * 2 * LOG2, rtol=1e-6)  # / max(1, 0)
    np.testing.assert_allclose(by_batch, 5 * 2 * LOG2 / 2, rtol=1e-6)  # / B


def test_giou_decodes_with_anchors(run):
    coder = FasterRcnnBoxCoder()
    target_boxes = np.broadcast_to(ANCHORS, (2, 3, 4)).copy()
    target_boxes[0, 0] = [0.0, 0.5, 1.0, 1.5]  # giou with anchor 0 = 1/3
    box_targets = np.asarray(coder.encode(target_boxes, ANCHORS))
    params = DetectionLossParams(localization="giou")
    logits = np.zeros((2, 3, 2), np.float32)
    enc = _box_encodings() * 1e3  # huge codes on non-positives: exp() would overflow
    _, parts = run(
        detection_loss,
        logits,
        enc,
        _targets(box_targets),
        params=params,
        anchors=ANCHORS,
        box_coder=coder,
    )
    np.testing.assert_allclose(parts["localization_loss"], (2.0 / 3.0) / 2.0, rtol=1e-5)

    def loss(e):
        return detection_loss(
            jnp.asarray(logits),
            e,
            _targets(box_targets),
            params,
            anchors=ANCHORS,
            box_coder=coder,
        )[0]

    grad = np.asarray(jax.jit(jax.grad(loss))(jnp.asarray(enc)))
    assert np.all(np.isfinite(grad))
    assert not grad[:, 1:].any()  # non-positives get no box gradient


def test_bf16_logits_computed_in_float32():
    params = DetectionLossParams()
    logits = np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 3, 2)
    loss = jax.jit(lambda x: detection_loss(x, _box_encodings(), _targets(), params)[0])
    ref, low = loss(logits), loss(jnp.asarray(logits, jnp.bfloat16))
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(low, ref, rtol=2e-2)


def test_bad_params_and_shapes():
    with pytest.raises(ValueError, match="allowed"):
        DetectionLossParams(classification="focal")
    with pytest.raises(ValueError, match="add_background_class"):
        detection_loss(
            np.zeros((2, 3, 3), np.float32), _box_encodings(), _targets(), DetectionLossParams()
        )
    with pytest.raises(ValueError, match="anchors"):
        detection_loss(
            np.zeros((2, 3, 2), np.float32),
            _box_encodings(),
            _targets(),
            DetectionLossParams(localization="giou"),
        )


def test_logit_scale_applies_to_softmax_only():
    logits = np.linspace(-3, 3, 18, dtype=np.float32).reshape(2, 3, 3)
    enc, targets = _box_encodings(), _targets()
    soft = dict(classification="softmax", add_background_class=True)
    scaled = detection_loss(logits, enc, targets, DetectionLossParams(**soft, logit_scale=2.0))
    halved = detection_loss(logits / 2, enc, targets, DetectionLossParams(**soft))
    np.testing.assert_allclose(scaled[0], halved[0], rtol=1e-6)
    sig = detection_loss(logits[..., 1:], enc, targets, DetectionLossParams(logit_scale=2.0))
    raw = detection_loss(logits[..., 1:], enc, targets, DetectionLossParams())
    np.testing.assert_allclose(sig[0], raw[0], rtol=1e-6)


def test_normalize_loc_loss_by_codesize_divides_the_box_loss_by_four():
    import jax.numpy as jnp

    from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss

    logits = jnp.zeros((1, 2, 3))
    enc = jnp.array([[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    targets = {
        "cls_targets": jnp.zeros((1, 2, 3)),
        "cls_weights": jnp.ones((1, 2)),
        "box_targets": jnp.zeros((1, 2, 4)),
        "box_weights": jnp.array([[1.0, 0.0]]),
    }
    plain = DetectionLossParams(localization="l1")
    by_code = DetectionLossParams(localization="l1", normalize_loc_loss_by_codesize=True)
    _, a = detection_loss(logits, enc, targets, plain)
    _, b = detection_loss(logits, enc, targets, by_code)
    assert float(a["localization_loss"]) == 3.0  # |1| + |2| over one positive
    assert float(b["localization_loss"]) == 0.75
