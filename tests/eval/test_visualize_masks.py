"""Instance masks drawn translucently in the class colour, under the box outlines and tags."""

import numpy as np
import pytest

from jaxdet.eval.visualize import MASK_ALPHA, blend_masks, class_color, draw_detections

NAMES = ["circle", "square"]


def _image(h=60, w=80):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def _blend(pixels, color, alpha=MASK_ALPHA):
    return np.round((1 - alpha) * pixels.astype(np.float64)
                    + alpha * np.asarray(color, np.float64)).astype(np.uint8)


def test_mask_pixels_blend_toward_the_class_colour_and_others_are_unchanged():
    image = _image()
    boxes = np.array([[10, 10, 50, 70]], np.float32)
    mask = np.zeros((1, 60, 80), np.uint8)
    mask[0, 20:45, 15:60] = 1
    mask[0, 30, 5] = 1  # a pixel of the mask outside its box
    with_mask = np.asarray(draw_detections(image, boxes, [1], [0.9], NAMES, masks=mask))
    without = np.asarray(draw_detections(image, boxes, [1], [0.9], NAMES))
    inside = mask[0] > 0
    # outside the mask: exactly the drawing without masks (outline, tag, untouched pixels)
    np.testing.assert_array_equal(with_mask[~inside], without[~inside])
    # inside, where no outline or tag is drawn: blended toward the class colour
    plain = inside & (without == image).all(axis=-1)
    assert plain.sum() > 1000
    np.testing.assert_array_equal(with_mask[plain], _blend(image[plain], class_color(1)))
    distance = np.abs(with_mask[plain].astype(int) - np.asarray(class_color(1)))
    assert (distance <= np.abs(image[plain].astype(int) - np.asarray(class_color(1)))).all()
    # outlines and tags stay on top of the mask
    drawn = inside & ~(without == image).all(axis=-1)
    assert drawn.any()
    np.testing.assert_array_equal(with_mask[drawn], without[drawn])


def test_overlapping_masks_best_score_on_top_and_ground_truth_without_scores():
    image = np.full((80, 80, 3), 100, np.uint8)
    boxes = np.array([[0, 0, 80, 80], [0, 0, 80, 80]], np.float32)  # tags at the borders
    masks = np.zeros((2, 80, 80), bool)
    masks[0, 20:50, 20:50] = True
    masks[1, 35:65, 35:65] = True
    out = np.asarray(draw_detections(image, boxes, [0, 1], [0.3, 0.8], NAMES, masks=masks))
    gray = np.full((1, 3), 100, np.uint8)
    first = _blend(gray, class_color(0))
    assert tuple(out[30, 30]) == tuple(first[0])
    assert tuple(out[60, 60]) == tuple(_blend(gray, class_color(1))[0])
    # the better-scored mask is blended last (rounded once, at the end)
    a = MASK_ALPHA
    both = np.round((1 - a) * ((1 - a) * 100 + a * np.array(class_color(0)))
                    + a * np.array(class_color(1)))
    np.testing.assert_array_equal(out[45, 45], both)
    gt = np.asarray(draw_detections(image, boxes[:1], [1], None, NAMES, masks=masks[:1],
                                    mask_alpha=1.0))
    assert tuple(gt[30, 30]) == class_color(1)


def test_blend_masks_checks_shapes():
    image = np.zeros((5, 6, 3), np.uint8)
    np.testing.assert_array_equal(blend_masks(image, np.zeros((0, 5, 6)), []), image)
    with pytest.raises(ValueError, match="image's"):
        blend_masks(image, np.zeros((1, 6, 5)), [(1, 2, 3)])
    with pytest.raises(ValueError, match="masks of shape"):
        draw_detections(image, [[0, 0, 2, 2]], [0], None, NAMES, masks=np.zeros((2, 5, 6)))
