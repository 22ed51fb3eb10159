"""Greedy bipartite matching (TF GreedyBipartiteMatcher) against hand-computed matches."""

import numpy as np

from jaxdet.core.box_coders import FasterRcnnBoxCoder
from jaxdet.core.matcher import argmax_match, bipartite_match
from jaxdet.core.target_assigner import assign_targets

# Rows = ground truth (row 2 is padding), columns = anchors.
SIM = np.array(
    [
        [0.9, 0.3, 0.1, 0.0],
        [0.95, 0.4, 0.2, 0.0],
        [1.0, 1.0, 1.0, 1.0],
    ],
    np.float32,
)
VALID = np.array([True, True, False])


def test_global_max_first_then_next_free_pair(run):
    # (row 1, col 0) = 0.95 is the global max; row 0 then takes its best free column, 1.
    match = run(bipartite_match, SIM, VALID)
    assert match.dtype == np.int32
    np.testing.assert_array_equal(match, [1, 0, -1, -1])
    # argmax would give column 1 to row 1 as well (and no thresholds here).
    np.testing.assert_array_equal(run(argmax_match, SIM, VALID, matched_threshold=None),
                                  [1, 1, 1, 0])


def test_every_valid_row_matched_even_at_zero_similarity(run):
    sim = np.array([[0.0, 0.0, 0.0], [0.0, 0.7, 0.0], [0.6, 0.8, 0.0]], np.float32)
    # (2,1)=0.8 -> then free rows {0,1}, cols {0,2}: all 0.0 -> row-major first: (0,0),
    # then (1,2).
    match = run(bipartite_match, sim, np.array([True, True, True]))
    np.testing.assert_array_equal(match, [0, 2, 1])


def test_more_rows_than_columns_and_ties(run):
    sim = np.full((3, 2), 0.5, np.float32)  # all tied: row-major order wins
    np.testing.assert_array_equal(run(bipartite_match, sim, np.ones(3, bool)), [0, 1])
    np.testing.assert_array_equal(run(bipartite_match, sim, np.array([False, True, True])),
                                  [1, 2])


def test_no_valid_rows_all_negatives(run):
    np.testing.assert_array_equal(run(bipartite_match, SIM, np.zeros(3, bool)), [-1] * 4)


def test_assign_targets_with_bipartite_matcher(run):
    anchors = np.array([[0, 0, 0.5, 0.5], [0, 0, 0.4, 0.5], [0.5, 0.5, 1, 1]], np.float32)
    gt = np.array([[0, 0, 0.5, 0.5], [0, 0, 1, 1]], np.float32)
    out = run(
        assign_targets, anchors, gt, np.array([1, 0], np.int32), np.array([True, True]),
        np.array([False, False]), num_classes=2, box_coder=FasterRcnnBoxCoder(),
        matched_threshold=0.5, matcher="bipartite",
    )
    # IoU gt0: [1, 0.8, 0]; gt1: [0.25, 0.2, 0.25]. (gt0, anchor 0) first; gt1's best free
    # anchor is then 2 (0.25 > 0.2). Anchor 1 (IoU 0.8, argmax would match it) is negative.
    np.testing.assert_array_equal(out["match"], [0, -1, 1])
    np.testing.assert_array_equal(out["box_weights"], [1, 0, 1])
    np.testing.assert_array_equal(out["cls_weights"], [1, 1, 1])
    np.testing.assert_array_equal(out["cls_targets"], [[0, 1], [0, 0], [1, 0]])
