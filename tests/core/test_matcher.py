import numpy as np
import pytest

from jaxdet.core.matcher import argmax_match, gather_by_match

# Rows = ground truth (row 2 is padding), columns = anchors. Thresholds 0.5 / 0.4.
SIM = np.array(
    [
        [0.9, 0.45, 0.1, 0.3, 0.0, 0.6, 0.5, 0.4],
        [0.2, 0.3, 0.55, 0.42, 0.0, 0.7, 0.1, 0.1],
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ],
    np.float32,
)
VALID = np.array([True, True, False])


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        # >= 0.5 matched; [0.4, 0.5) ignored; < 0.4 negative. Exact 0.5 matches, 0.4 ignored.
        (dict(unmatched_threshold=0.4), [0, -2, 1, -2, -1, 1, 0, -2]),
        # Swapped bands: < 0.4 ignored, [0.4, 0.5) negative.
        (
            dict(unmatched_threshold=0.4, negatives_lower_than_unmatched=False),
            [0, -1, 1, -1, -2, 1, 0, -1],
        ),
        # unmatched_threshold defaults to matched_threshold: no ignored band.
        (dict(), [0, -1, 1, -1, -1, 1, 0, -1]),
    ],
)
def test_threshold_bands_and_padded_rows(run, kwargs, expected):
    match = run(argmax_match, SIM, VALID, matched_threshold=0.5, **kwargs)
    assert match.dtype == np.int32
    np.testing.assert_array_equal(match, expected)


def test_no_threshold_is_plain_argmax_over_valid_rows(run):
    match = run(argmax_match, SIM, VALID, matched_threshold=None)
    np.testing.assert_array_equal(match, [0, 0, 1, 1, 0, 1, 0, 0])


def test_force_match_for_each_row(run):
    sim = np.array(
        [
            [0.3, 0.1, 0.0],  # best column 0, below threshold
            [0.35, 0.2, 0.0],  # also best column 0: the lower row index (0) wins it
            [0.0, 0.1, 0.38],  # best column 2
            [0.0, 0.9, 0.0],  # padding: never forces
        ],
        np.float32,
    )
    valid = np.array([True, True, True, False])
    kw = dict(matched_threshold=0.5, unmatched_threshold=0.4)
    np.testing.assert_array_equal(run(argmax_match, sim, valid, **kw), [-1, -1, -1])
    forced = run(argmax_match, sim, valid, force_match_for_each_row=True, **kw)
    np.testing.assert_array_equal(forced, [0, -1, 2])


def test_no_valid_rows_all_unmatched(run):
    valid = np.zeros((3,), bool)
    for kw in (
        dict(unmatched_threshold=0.4, negatives_lower_than_unmatched=False),
        dict(force_match_for_each_row=True),
    ):
        match = run(argmax_match, SIM, valid, matched_threshold=0.5, **kw)
        np.testing.assert_array_equal(match, [-1] * SIM.shape[1])


def test_zero_rows():
    match = argmax_match(np.zeros((0, 4), np.float32), np.zeros((0,), bool), 0.5)
    np.testing.assert_array_equal(match, [-1, -1, -1, -1])


def test_threshold_validation():
    with pytest.raises(ValueError, match="must be <="):
        argmax_match(SIM, VALID, 0.4, unmatched_threshold=0.5)
    with pytest.raises(ValueError, match="negatives_lower_than_unmatched"):
        argmax_match(SIM, VALID, 0.5, negatives_lower_than_unmatched=False)


def test_gather_by_match(run):
    table = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    match = np.array([1, -1, -2, 0], np.int32)
    unmatched = np.array([-1.0, -1.0], np.float32)
    ignored = np.array([9.0, 9.0], np.float32)
    out = run(gather_by_match, table, match, unmatched, ignored)
    np.testing.assert_array_equal(out, [[3, 4], [-1, -1], [9, 9], [1, 2]])
    # Integer tables come back exactly, in their own dtype; precise float values survive.
    int_table = np.array([[7], [123456]], np.int32)
    ints = run(gather_by_match, int_table, match, np.array([0]), np.array([-5]))
    assert ints.dtype == np.int32
    np.testing.assert_array_equal(ints[:, 0], [123456, 0, -5, 7])
    precise = np.array([[0.123456789], [1.000001]], np.float32)
    out = run(gather_by_match, precise, match, unmatched[:1], ignored[:1])
    np.testing.assert_array_equal(out[[0, 3], 0], [precise[1, 0], precise[0, 0]])
