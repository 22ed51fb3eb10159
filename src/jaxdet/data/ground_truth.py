"""Pads per-image ground truth to a static ``max_boxes`` with validity / ignore masks."""

from __future__ import annotations

import numpy as np

from jaxdet.data.geometry import Sample


def pad_ground_truth(sample: Sample, max_boxes: int) -> Sample:
    """Returns a sample with fixed-size ground truth.

    Output keys: ``"boxes"`` float32 [max_boxes, 4], ``"classes"`` int32 [max_boxes],
    ``"valid"`` bool [max_boxes], ``"ignore"`` bool [max_boxes] (from ``is_crowd``; always
    False on padding) and ``"num_truncated"`` int (objects beyond ``max_boxes``, which are cut
    off in order: the first ``max_boxes`` objects are kept). ``"is_crowd"`` is removed.
    ``"keypoints"`` [n, K, 2] and ``"keypoint_visibility"`` [n, K], when present, are padded
    the same way to [max_boxes, K, 2] and [max_boxes, K] (padding unlabelled), and instance
    ``"masks"`` uint8 [n, Hm, Wm] (the resizer's strided grid, ``data.masks``) to
    [max_boxes, Hm, Wm] (padding all 0). Memory per image: max_boxes x Hm x Wm bytes, e.g.
    100 x 256 x 256 = 6.6 MB for a 1024 x 1024 input at ``mask_stride`` 4.
    """
    if max_boxes < 1:
        raise ValueError(f"max_boxes must be >= 1, got {max_boxes}")
    boxes = np.asarray(sample["boxes"], np.float32).reshape(-1, 4)
    n = boxes.shape[0]
    classes = np.asarray(sample.get("classes", np.zeros((n,), np.int32)), np.int32).reshape(-1)
    crowd = np.asarray(sample.get("is_crowd", np.zeros((n,), bool)), bool).reshape(-1)
    if classes.shape[0] != n or crowd.shape[0] != n:
        raise ValueError(
            f"boxes ({n}), classes ({classes.shape[0]}) and is_crowd ({crowd.shape[0]}) "
            "must have the same length"
        )
    k = min(n, max_boxes)
    out = {key: value for key, value in sample.items() if key != "is_crowd"}
    out["boxes"] = np.zeros((max_boxes, 4), np.float32)
    out["boxes"][:k] = boxes[:k]
    out["classes"] = np.zeros((max_boxes,), np.int32)
    out["classes"][:k] = classes[:k]
    out["valid"] = np.zeros((max_boxes,), bool)
    out["valid"][:k] = True
    out["ignore"] = np.zeros((max_boxes,), bool)
    out["ignore"][:k] = crowd[:k]
    out["num_truncated"] = n - k
    if "keypoints" in sample:
        visibility = np.asarray(sample["keypoint_visibility"], np.int32).reshape(n, -1)
        num_kp = visibility.shape[1]
        out["keypoints"] = np.zeros((max_boxes, num_kp, 2), np.float32)
        out["keypoints"][:k] = np.asarray(sample["keypoints"], np.float32).reshape(
            n, num_kp, 2)[:k]
        out["keypoint_visibility"] = np.zeros((max_boxes, num_kp), np.int32)
        out["keypoint_visibility"][:k] = visibility[:k]
    if "masks" in sample:
        masks = np.asarray(sample["masks"], np.uint8)
        if masks.ndim != 3 or masks.shape[0] != n:
            raise ValueError(f"masks have shape {masks.shape}, expected [{n}, H, W] (one per box)")
        out["masks"] = np.zeros((max_boxes, *masks.shape[1:]), np.uint8)
        out["masks"][:k] = masks[:k]
    return out
