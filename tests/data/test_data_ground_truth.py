"""Padding ground truth to a static number of boxes."""

import numpy as np
import pytest

from jaxdet.data.ground_truth import pad_ground_truth


def _sample(n):
    boxes = np.arange(n * 4, dtype=np.float32).reshape(n, 4) / 100
    return {"image": np.zeros((4, 4, 3), np.float32), "boxes": boxes,
            "classes": np.arange(n, dtype=np.int32) + 1,
            "is_crowd": np.arange(n) % 2 == 1, "image_id": 3}


def test_pads_with_invalid_entries():
    out = pad_ground_truth(_sample(2), 4)
    assert out["boxes"].shape == (4, 4) and out["boxes"].dtype == np.float32
    np.testing.assert_array_equal(out["boxes"][:2], _sample(2)["boxes"])
    np.testing.assert_array_equal(out["boxes"][2:], 0)
    np.testing.assert_array_equal(out["classes"], [1, 2, 0, 0])
    assert out["classes"].dtype == np.int32
    np.testing.assert_array_equal(out["valid"], [True, True, False, False])
    np.testing.assert_array_equal(out["ignore"], [False, True, False, False])
    assert out["num_truncated"] == 0
    assert "is_crowd" not in out and out["image_id"] == 3


def test_truncates_keeping_the_first_boxes():
    out = pad_ground_truth(_sample(5), 3)
    np.testing.assert_array_equal(out["boxes"], _sample(5)["boxes"][:3])
    np.testing.assert_array_equal(out["classes"], [1, 2, 3])
    np.testing.assert_array_equal(out["valid"], [True] * 3)
    np.testing.assert_array_equal(out["ignore"], [False, True, False])
    assert out["num_truncated"] == 2


def test_no_boxes():
    out = pad_ground_truth(_sample(0), 2)
    assert not out["valid"].any() and out["num_truncated"] == 0


def test_mismatched_lengths_raise():
    sample = _sample(2)
    sample["classes"] = sample["classes"][:1]
    with pytest.raises(ValueError, match="same length"):
        pad_ground_truth(sample, 4)
