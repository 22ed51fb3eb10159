"""Helpers of the family tests: :func:`masked_box_batch`, random boxes with instance masks for
the mask tasks (Mask R-CNN, DeepMAC)."""

import numpy as np


def masked_box_batch(task, counts: list[int], max_boxes: int, *, seed: int = 0,
                     top_half: bool = False) -> dict:
    """Random-normal images [B, H, W, 3] (B = ``len(counts)``), ``counts[i]`` random boxes
    (normalized yxyx) valid in image i of a ``max_boxes``-slot table, and their masks u8[B,
    max_boxes, Hm, Wm] on ``task.mask_shape``'s grid filling each box (its top half with
    ``top_half``). Classes are left to the caller."""
    rng = np.random.default_rng(seed)
    b, (h, w) = len(counts), task.input_size
    hm, wm = task.mask_shape
    boxes = np.zeros((b, max_boxes, 4), np.float32)
    valid = np.zeros((b, max_boxes), bool)
    masks = np.zeros((b, max_boxes, hm, wm), np.uint8)
    for i, n in enumerate(counts):
        tl = rng.uniform(0.0, 0.5, (n, 2))
        boxes[i, :n] = np.concatenate([tl, tl + rng.uniform(0.2, 0.5, (n, 2))], 1)
        valid[i, :n] = True
        for j in range(n):
            y0, x0, y1, x1 = (boxes[i, j] * [hm, wm, hm, wm]).astype(int)
            masks[i, j, y0:(y0 + y1) // 2 if top_half else y1, x0:x1] = 1
    return {"images": rng.normal(size=(b, h, w, 3)).astype(np.float32), "boxes": boxes,
            "valid": valid, "ignore": np.zeros((b, max_boxes), bool), "masks": masks,
            "image_info": np.tile(np.float32([h, w, h, w]), (b, 1)), "rng": rng}
