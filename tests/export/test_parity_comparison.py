"""The artifact-vs-predict comparisons on hand-built outputs: the strict one the parity
tests use, and the near-tie one the whole-family benchmark reports."""

from __future__ import annotations

import numpy as np

from jaxdet.export.runtimes import differences, near_tie_differences


def outputs(boxes, scores, classes, slots: int = 4) -> dict:
    """One image's detections padded to ``slots`` places, in the exporter's signature."""
    n = len(scores)
    b = np.zeros((1, slots, 4), np.float32)
    s = np.zeros((1, slots), np.float32)
    c = np.zeros((1, slots), np.float32)
    b[0, :n], s[0, :n], c[0, :n] = boxes, scores, classes
    return {"num_detections": np.array([n], np.float32), "detection_boxes": b,
            "detection_scores": s, "detection_classes": c}


A = [0.1, 0.1, 0.5, 0.5]
A_SHIFTED = [0.12, 0.1, 0.52, 0.5]   # overlaps A: NMS keeps one of the two
C = [0.6, 0.6, 0.9, 0.9]


def test_reordered_equal_detections_are_equal_in_both_comparisons():
    want = outputs([A, C], [0.9, 0.8], [1, 2])
    got = outputs([C, A], [0.8 + 2e-6, 0.9 - 1e-6], [2, 1])
    strict = differences(got, want)
    assert strict["classes_equal"] and max(strict["max_abs"].values()) <= 2e-6
    tie = near_tie_differences(got, want)
    assert tie == {"swaps": 0, "sorted_scores_max_abs": tie["sorted_scores_max_abs"],
                   "paired_max_abs": tie["paired_max_abs"], "ok": True}
    assert 1e-6 <= tie["sorted_scores_max_abs"] <= 2.1e-6


def test_a_near_tie_swap_is_told_from_a_real_difference():
    # NMS kept A in one runtime and the overlapping A_SHIFTED (score 1e-6 higher there) in
    # the other: the strict comparison sees a box 0.02 away, the near-tie one a swap.
    want = outputs([A, C], [0.7, 0.6], [1, 2])
    got = outputs([A_SHIFTED, C], [0.7 + 1e-6, 0.6], [1, 2])
    assert differences(got, want)["max_abs"]["detection_boxes"] > 0.019
    tie = near_tie_differences(got, want, max_swap_fraction=0.5)
    assert tie["swaps"] == 1 and tie["ok"]
    # The same shift with a score 0.01 apart is no tie.
    far = outputs([A_SHIFTED, C], [0.71, 0.6], [1, 2])
    assert not near_tie_differences(far, want, max_swap_fraction=0.5)["ok"]


def test_too_many_swaps_or_other_counts_are_not_ok():
    want = outputs([A, C], [0.7, 0.6], [1, 2])
    moved = outputs([A_SHIFTED, [0.62, 0.6, 0.92, 0.9]], [0.7, 0.6], [1, 2])
    tie = near_tie_differences(moved, want)      # every detection moved: a decoding bug
    assert tie["swaps"] == 2 and not tie["ok"]
    fewer = outputs([A], [0.7], [1])
    assert not near_tie_differences(fewer, want)["ok"]
    assert not differences(fewer, want)["num_detections_equal"]
