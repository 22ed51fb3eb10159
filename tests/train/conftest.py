"""Fixtures of the train tests: ``two_box_batch``, a function making a small train batch: 4
random-normal images, each with the same two ground-truth boxes (class 1) in an 8-slot table.
(Random boxes with instance masks for the mask tasks: tests/tasks/conftest.py.)"""

import numpy as np
import pytest


def _two_box_batch(task, seed: int = 0) -> dict:
    """Images [4, H, W, 3] at ``task.input_size``; boxes [4, 8, 4] normalized yxyx, 2 valid."""
    rng = np.random.default_rng(seed)
    h, w = task.input_size
    boxes = np.zeros((4, 8, 4), np.float32)
    boxes[:, 0] = [0.1, 0.1, 0.6, 0.5]
    boxes[:, 1] = [0.4, 0.3, 0.9, 0.95]
    valid = np.zeros((4, 8), bool)
    valid[:, :2] = True
    return {
        "images": rng.normal(size=(4, h, w, 3)).astype(np.float32),
        "boxes": boxes,
        "classes": np.ones((4, 8), np.int32),
        "valid": valid,
        "ignore": np.zeros((4, 8), bool),
    }


@pytest.fixture(scope="session")
def two_box_batch():
    """``two_box_batch(task, seed=0) -> batch`` (see ``_two_box_batch``)."""
    return _two_box_batch
