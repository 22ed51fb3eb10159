"""Fixtures for the data tests: box/pixel helpers (the tiny generated shapes data set,
``shapes_dir``, is in tests/conftest.py)."""

from __future__ import annotations

import types

import numpy as np
import pytest


@pytest.fixture
def blocks():
    """Helpers for image/box consistency checks (see block_sample / find_block below)."""
    return types.SimpleNamespace(
        COLOURS=BLOCK_COLOURS, sample=block_sample, find=find_block,
        assert_frame=assert_boxes_frame_blocks,
    )


# Block colours, one per class, far from the grey background and from each other.
BLOCK_COLOURS = np.array([[250, 20, 20], [20, 20, 250], [20, 230, 20]], np.float32)


def block_sample(height=60, width=80, rects=((10, 20, 30, 50), (35, 5, 55, 25))):
    """A sample with a grey gradient background and one solid block per pixel rect.

    rects are pixel (y0, x0, y1, x1); block k has colour BLOCK_COLOURS[k] and class k.
    """
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    grey = 90 + 40 * (xx / width) + 10 * (yy / height)
    image = np.repeat(grey[..., None], 3, axis=2)
    boxes = []
    for k, (y0, x0, y1, x1) in enumerate(rects):
        image[y0:y1, x0:x1] = BLOCK_COLOURS[k]
        boxes.append([y0 / height, x0 / width, y1 / height, x1 / width])
    n = len(rects)
    return {
        "image": image.astype(np.float32),
        "boxes": np.array(boxes, np.float32).reshape(-1, 4),
        "classes": np.arange(n, dtype=np.int32),
        "is_crowd": np.array([False, True, False][:n]),
        "image_id": 7,
        "image_info": np.array([height, width, height, width], np.float32),
    }


def find_block(image, colour):
    """Pixel rect (y0, x0, y1, x1) of pixels closer to ``colour`` than to the background,
    or None when there are none."""
    dist = np.linalg.norm(image - colour, axis=-1)
    hit = dist < 100
    if not hit.any():
        return None
    rows, cols = np.nonzero(hit.any(axis=1))[0], np.nonzero(hit.any(axis=0))[0]
    return np.array([rows[0], cols[0], rows[-1] + 1, cols[-1] + 1], np.float32)


def assert_boxes_frame_blocks(sample, tol=1.0):
    """Every output box, scaled to pixels, frames its class's block to within ``tol`` px."""
    image = sample["image"]
    height, width = image.shape[:2]
    scale = np.array([height, width, height, width], np.float32)
    assert len(sample["boxes"]) == len(sample["classes"]) == len(sample["is_crowd"])
    for box, cls in zip(sample["boxes"], sample["classes"], strict=True):
        found = find_block(image, BLOCK_COLOURS[cls])
        assert found is not None, f"class {cls} kept but its block is not visible"
        np.testing.assert_allclose(box * scale, found, atol=tol,
                                   err_msg=f"class {cls}: box does not frame its block")
