import functools

import jax
import numpy as np
import pytest

from jaxdet.core.nms import batched_nms, convert_scores


def test_convert_scores(run):
    logits = np.array([[0.0, np.log(3.0), 0.0]], np.float32)
    np.testing.assert_allclose(run(convert_scores, logits, converter="identity"), logits)
    np.testing.assert_allclose(
        run(convert_scores, logits, converter="sigmoid", has_background=True), [[0.75, 0.5]]
    )
    np.testing.assert_allclose(
        run(convert_scores, logits, converter="softmax", has_background=True),
        [[0.6, 0.2]],
        rtol=1e-6,
    )
    # logit_scale divides before the conversion: softmax([0, log 3, 0] / 2).
    out = run(convert_scores, logits, converter="softmax", logit_scale=2.0)
    s3 = np.sqrt(3.0)
    np.testing.assert_allclose(out, [[1 / (2 + s3), s3 / (2 + s3), 1 / (2 + s3)]], rtol=1e-6)
    with pytest.raises(ValueError, match="allowed"):
        convert_scores(logits, "tanh")


@pytest.mark.slow
def test_batched_nms_by_hand(run):
    boxes = np.array(
        [
            [
                [0.0, 0.0, 1.0, 1.0],
                [0.0, 0.1, 1.0, 1.1],  # IoU 0.9 / 1.1 = 0.82 with box 0
                [2.0, 2.0, 3.0, 3.0],
                [0.0, 0.6, 1.0, 1.6],  # IoU 0.4 / 1.6 = 0.25 with box 0
            ]
        ],
        np.float32,
    )
    # Two classes; class 1 only has box 2 above the threshold.
    scores = np.array([[[0.9, 0.0], [0.8, 0.1], [0.05, 0.7], [0.6, 0.2]]], np.float32)
    kw = dict(
        score_threshold=0.15, iou_threshold=0.5, max_detections_per_class=3, max_total_detections=5
    )
    out = run(batched_nms, boxes, scores, **kw)
    np.testing.assert_allclose(out["scores"], [[0.9, 0.7, 0.6, 0.2, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(out["classes"], [[0, 1, 0, 1, 0]])
    np.testing.assert_array_equal(out["num_detections"], [4])
    np.testing.assert_allclose(out["boxes"][0], boxes[0, [0, 2, 3, 3]].tolist() + [[0.0] * 4])
    assert out["classes"].dtype == out["num_detections"].dtype == np.int32
    # Class agnostic: max score per box [0.9, 0.8, 0.7, 0.6] -> box 1 suppressed by box 0.
    out = run(batched_nms, boxes, scores, class_agnostic=True, **kw)
    np.testing.assert_allclose(out["scores"], [[0.9, 0.7, 0.6, 0.0, 0.0]], rtol=1e-6)
    np.testing.assert_array_equal(out["classes"], [[0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(out["num_detections"], [3])


def _np_iou(box, boxes):
    h = np.maximum(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0)
    w = np.maximum(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0)
    inter = h * w
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = (box[2] - box[0]) * (box[3] - box[1]) + area - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


def _np_greedy(boxes, scores, score_threshold, iou_threshold, max_out, top_k):
    order = [i for i in np.argsort(-scores, kind="stable")[:top_k] if scores[i] > score_threshold]
    keep = []
    while order and len(keep) < max_out:
        best = order.pop(0)
        keep.append(best)
        ious = _np_iou(boxes[best], boxes[order]) if order else []
        order = [j for j, v in zip(order, ious, strict=True) if v <= iou_threshold]
    return keep


def _np_batched_nms(boxes, scores, kw, class_agnostic):
    out_boxes, out_scores, out_classes, out_num = [], [], [], []
    d = kw["max_total_detections"]
    for b in range(boxes.shape[0]):
        cand = []  # (score, class, anchor)
        if class_agnostic:
            best, cls = scores[b].max(-1), scores[b].argmax(-1)
            for i in _np_greedy(
                boxes[b], best, kw["score_threshold"], kw["iou_threshold"], d, kw["pre_nms_top_k"]
            ):
                cand.append((best[i], cls[i], i))
        else:
            for c in range(scores.shape[2]):
                class_boxes = boxes[b] if boxes.ndim == 3 else boxes[b, :, c]
                for i in _np_greedy(
                    class_boxes,
                    scores[b, :, c],
                    kw["score_threshold"],
                    kw["iou_threshold"],
                    kw["max_detections_per_class"],
                    kw["pre_nms_top_k"],
                ):
                    cand.append((scores[b, i, c], c, i))
        cand = sorted(cand, key=lambda t: -t[0])[:d]
        own = [boxes[b, t[2]] if boxes.ndim == 3 else boxes[b, t[2], t[1]] for t in cand]
        n = len(cand)
        out_num.append(n)
        out_scores.append([t[0] for t in cand] + [0.0] * (d - n))
        out_classes.append([t[1] for t in cand] + [0] * (d - n))
        out_boxes.append(own + [np.zeros(4)] * (d - n))
    return np.array(out_boxes), np.array(out_scores), np.array(out_classes), np.array(out_num)


@pytest.mark.parametrize(
    "class_agnostic, max_total_detections, levels, top_k",
    # 40 > all survivors: the merge pads; 12 cuts the merged list. Per class, about 10 of
    # the 30 top-k candidates survive, so the per-class cap of 10 binds only sometimes.
    # levels=5: scores on 5 values, so most ties are within and across classes (the merged
    # loop must pick the lower class, then the lower candidate, as the merge sort does).
    # top_k=50: every anchor is a candidate (no per-class top-k; classes share the boxes).
    [(False, 12, 0, 30), (False, 40, 0, 30), (True, 12, 0, 30), (False, 12, 5, 30),
     (False, 40, 5, 30), (False, 40, 5, 50), (False, 12, 0, 50)],
)
def test_batched_nms_matches_numpy_reference(class_agnostic, max_total_detections, levels,
                                             top_k):
    kw = dict(
        score_threshold=0.3,
        iou_threshold=0.3,
        max_detections_per_class=10,
        max_total_detections=max_total_detections,
        pre_nms_top_k=top_k,
    )
    nms = jax.jit(functools.partial(batched_nms, class_agnostic=class_agnostic, **kw))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        center = rng.uniform(0.2, 0.8, (2, 50, 2))
        size = rng.uniform(0.2, 0.5, (2, 50, 2))
        boxes = np.concatenate([center - size / 2, center + size / 2], -1).astype(np.float32)
        scores = rng.uniform(0.0, 1.0, (2, 50, 3)).astype(np.float32)
        if levels:
            scores = (np.ceil(scores * levels) / levels).astype(np.float32)
        out = jax.tree.map(np.asarray, nms(boxes, scores))
        ref_boxes, ref_scores, ref_classes, ref_num = _np_batched_nms(
            boxes, scores, kw, class_agnostic
        )
        np.testing.assert_array_equal(out["num_detections"], ref_num)
        assert ref_num.min() > 0
        np.testing.assert_allclose(out["scores"], ref_scores, rtol=1e-6)
        np.testing.assert_array_equal(out["classes"], ref_classes)
        np.testing.assert_allclose(out["boxes"], ref_boxes, rtol=1e-6)


@pytest.mark.parametrize("top_k", [20, 30])
def test_batched_nms_with_each_class_own_boxes_matches_numpy_reference(top_k):
    """Faster R-CNN's second stage: boxes [B, A, C, 4], each class NMS-ed on its own boxes."""
    kw = dict(score_threshold=0.2, iou_threshold=0.4, max_detections_per_class=6,
              max_total_detections=14, pre_nms_top_k=top_k)
    rng = np.random.default_rng(3)
    center, size = rng.uniform(0.2, 0.8, (2, 30, 3, 2)), rng.uniform(0.2, 0.5, (2, 30, 3, 2))
    boxes = np.concatenate([center - size / 2, center + size / 2], -1).astype(np.float32)
    scores = np.ceil(rng.uniform(0.0, 1.0, (2, 30, 3)) * 8).astype(np.float32) / 8
    out = jax.tree.map(np.asarray, jax.jit(functools.partial(batched_nms, **kw))(boxes, scores))
    ref_boxes, ref_scores, ref_classes, ref_num = _np_batched_nms(boxes, scores, kw, False)
    np.testing.assert_array_equal(out["num_detections"], ref_num)
    np.testing.assert_array_equal(out["classes"], ref_classes)
    np.testing.assert_allclose(out["scores"], ref_scores, rtol=1e-6)
    np.testing.assert_allclose(out["boxes"], ref_boxes, rtol=1e-6)


@pytest.mark.slow
def test_batched_nms_per_image_form_equals_the_vmapped_loop():
    """The TFLite exporter's form (one NMS loop per image), XLA's ``lax.map`` over the images
    and the vmapped loop (the other exporter forms) give the same values. The default form
    stages both of its own: ``lax.map`` for a CPU, the vmap (the other forms') elsewhere."""
    from jaxdet.core.portable import exportable, fresh_trace

    rng = np.random.default_rng(7)
    center, size = rng.uniform(0.2, 0.8, (3, 40, 2)), rng.uniform(0.1, 0.4, (3, 40, 2))
    boxes = np.concatenate([center - size / 2, center + size / 2], -1).astype(np.float32)
    scores = np.ceil(rng.uniform(0.0, 1.0, (3, 40, 4)) * 6).astype(np.float32) / 6
    nms = functools.partial(batched_nms, score_threshold=0.2, iou_threshold=0.4,
                            max_detections_per_class=5, max_total_detections=15,
                            pre_nms_top_k=25)
    mapped = jax.jit(fresh_trace(nms))(boxes, scores)
    assert "platform_index" in str(jax.make_jaxpr(fresh_trace(nms))(boxes, scores))
    with exportable(pooling_as_slices=False, row_as_sum=False, nms_as_op=False,
                    nms_per_image=True):
        looped = jax.jit(fresh_trace(nms))(boxes, scores)
    with exportable(pooling_as_slices=True, row_as_sum=False, nms_as_op=False):
        vmapped = jax.jit(fresh_trace(nms))(boxes, scores)
    assert int(vmapped["num_detections"].min()) > 5
    for key in vmapped:
        np.testing.assert_array_equal(np.asarray(looped[key]), np.asarray(vmapped[key]))
        np.testing.assert_array_equal(np.asarray(mapped[key]), np.asarray(vmapped[key]))


@pytest.mark.parametrize("k", [1, 17, 40, 63, 64])
def test_top_k_mask_picks_what_lax_top_k_picks(k):
    """Ties (scores on 7 levels), negatives and -inf: the same entries as ``lax.top_k``."""
    from jaxdet.core.nms import top_k_mask

    rng = np.random.default_rng(k)
    scores = np.round(rng.normal(size=(2, 3, 64)) * 3) / 3
    scores[0, 0, :5] = -np.inf
    scores = scores.astype(np.float32)
    _, idx = jax.lax.top_k(scores, k)
    expected = np.zeros(scores.shape, bool)
    np.put_along_axis(expected, np.asarray(idx), True, axis=-1)
    got = np.asarray(jax.jit(top_k_mask, static_argnums=1)(scores, k))
    np.testing.assert_array_equal(got, expected)
