"""Drawing: box outlines in the class colour, tags kept inside the image, fitted grid cells."""

import numpy as np
import pytest
from PIL import Image

from jaxdet.eval.visualize import (
    class_color,
    draw_detections,
    image_grid,
    line_width,
    place_tags,
    tag_candidates,
    tag_rect,
    title_height,
)

NAMES = ["circle", "square", "a very long class name"]


def _gray(h=100, w=120, value=128):
    return np.full((h, w, 3), value, np.uint8)


def test_class_colours_distinct_and_stable():
    colours = [class_color(k) for k in range(8)]
    assert len(set(colours)) == 8
    assert colours == [class_color(k) for k in range(8)]
    assert class_color(0, color_seed=1) != class_color(0)


def test_outline_pixels_take_the_class_colour():
    image = _gray()
    out = np.asarray(draw_detections(image, [[20, 30, 70, 90]], [1], None, NAMES))
    colour = class_color(1)
    assert line_width(100, 120) == 1
    # left, right (xmax - 1), bottom (ymax - 1) edges, away from the tag at the top-left
    for y, x in [(45, 30), (45, 89), (69, 60), (50, 89)]:
        assert tuple(out[y, x]) == colour, (y, x)
    assert tuple(out[45, 60]) == (128, 128, 128)  # inside the box: untouched
    assert tuple(out[45, 29]) == (128, 128, 128) and tuple(out[45, 91]) == (128, 128, 128)
    assert tuple(out[95, 5]) == (128, 128, 128)
    # the ground-truth tag sits above the box, filled with the class colour
    above = (out[:20] == colour).all(axis=-1)
    rows, cols = np.nonzero(above)
    assert rows.max() == 19 and rows.min() >= 5 and cols.min() == 30
    assert above.sum() > 100


def test_no_detections_leaves_the_image_unchanged():
    image = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    out = draw_detections(image, np.zeros((0, 4)), np.zeros((0,), int), np.zeros((0,)), NAMES)
    assert out.size == (50, 40)
    np.testing.assert_array_equal(np.asarray(out), image)


def test_tag_rect_stays_inside_the_image():
    # room above: tag above the box
    assert tag_rect((20, 10), (30, 40, 60, 80), (100, 100)) == (30, 30, 50, 40)
    # box at the top border: tag inside the box's top edge
    assert tag_rect((20, 10), (30, 0, 60, 80), (100, 100)) == (30, 0, 50, 10)
    # box at the right border: tag shifted left; wider than the image: pinned at 0
    assert tag_rect((20, 10), (95, 50, 99, 60), (100, 100)) == (80, 40, 100, 50)
    assert tag_rect((150, 10), (10, 50, 20, 60), (100, 100)) == (0, 40, 150, 50)
    # box at the bottom border, tag taller than the space above is impossible here; clamp y
    assert tag_rect((20, 10), (0, 95, 10, 100), (100, 100)) == (0, 85, 20, 95)


def test_drawn_tag_for_a_box_at_the_corner_is_inside_the_image():
    image = _gray()
    # top-right corner box with a long label: the tag moves left and below the top edge
    out = np.asarray(draw_detections(image, [[0, 110, 10, 120]], [2], [0.87], NAMES))
    colour = class_color(2)
    coloured = (out == colour).all(axis=-1)
    cols = np.nonzero(coloured.any(axis=0))[0]
    rows = np.nonzero(coloured.any(axis=1))[0]
    assert cols.min() < 110 - 30  # a wide tag shifted left, not cut at the border
    assert cols.max() == 119 and rows.min() == 0
    assert tuple(out[5, 119]) == colour  # the box's right edge


def test_grayscale_array_and_scores_label():
    out = draw_detections(np.full((64, 64), 200, np.uint8), [[10, 10, 40, 40]], [0], [0.5],
                          NAMES)
    assert out.mode == "RGB" and out.size == (64, 64)
    with pytest.raises(ValueError, match="2 boxes but 1 classes"):
        draw_detections(_gray(), np.zeros((2, 4)), [0], None, NAMES)


def test_image_grid_cells_keep_aspect_with_white_padding():
    red = Image.new("RGB", (40, 10), (255, 0, 0))
    blue = Image.new("RGB", (10, 10), (0, 0, 255))
    grid = image_grid([[red, blue], [blue]], cell_size=64, gap=4)
    assert grid.size == (2 * 64 + 3 * 4, 2 * 64 + 3 * 4)
    a = np.asarray(grid)
    cell = a[4:68, 4:68]  # first cell: red scaled to 64x16, centred vertically
    red_rows = np.nonzero((cell == (255, 0, 0)).all(axis=-1).any(axis=1))[0]
    assert red_rows.min() == 24 and red_rows.max() == 39
    assert (cell[:20] == 255).all() and (cell[44:] == 255).all()
    assert (a[72:136, 72:136] == 255).all()  # missing cell stays white

    titled = image_grid([[red], [blue]], ["one", "two"], (50, 30), gap=2)
    band = title_height((50, 30))
    assert titled.size == (50 + 2 * 2, 2 * (band + 30) + 3 * 2)
    assert (np.asarray(titled)[2:2 + band, :] != 255).any()  # title text drawn
    with pytest.raises(ValueError, match="2 rows but 1 titles"):
        image_grid([[red], [blue]], ["one"])


def test_place_tags_avoid_each_other_best_first():
    """Two boxes at the same place: the first (best) tag takes the preferred spot above the
    box; the second moves to its next free place instead of covering it."""
    box = (30.0, 40.0, 69.0, 79.0)
    first, second = place_tags([(20, 10), (20, 10)], [box, box], (100, 100))
    assert first == tag_rect((20, 10), box, (100, 100)) == (30, 30, 50, 40)
    assert second == (30, 40, 50, 50)  # inside the top-left corner: the next candidate
    # every candidate stays inside the image, even for a box at the bottom-right corner
    for rect in tag_candidates((20, 10), (85.0, 92.0, 99.0, 99.0), (100, 100)):
        assert 0 <= rect[0] and rect[2] <= 100 and 0 <= rect[1] and rect[3] <= 100
    # three tags and only overlapping places left: the least-covered one is chosen
    many = place_tags([(100, 50)] * 3, [(0.0, 0.0, 99.0, 99.0)] * 3, (100, 100))
    assert many[0] == (0, 0, 100, 50) and many[1] == (0, 50, 100, 100)


def test_best_box_is_drawn_on_top_and_its_label_first():
    """Overlapping boxes of two classes: where outlines cross, the best box's colour wins,
    whatever order the detections come in; the best label sits above the box."""
    image = _gray(100, 120)
    boxes = [[20, 30, 70, 90], [20, 30, 70, 90]]
    for classes, scores in (([0, 1], [0.4, 0.9]), ([1, 0], [0.9, 0.4])):
        out = np.asarray(draw_detections(image, boxes, classes, scores, NAMES))
        assert tuple(out[45, 30]) == class_color(1)  # shared left edge: the 0.9 box
        tag_rows = np.nonzero((out[:, 30:60] == class_color(1)).all(axis=-1).any(axis=1))[0]
        assert tag_rows.min() < 20  # the best label above the box
        low_rows = np.nonzero((out[:, 30:60] == class_color(0)).all(axis=-1).any(axis=1))[0]
        assert low_rows.min() >= 20  # the other label moved inside, not over the best one


def test_keypoints_and_skeleton_are_drawn_where_they_are_and_only_those_asked_for():
    image = np.zeros((60, 80, 3), np.uint8)
    boxes = np.array([[10, 10, 50, 70]], np.float64)
    keypoints = np.array([[[15.0, 15.0], [45.0, 65.0], [40.0, 20.0]]])  # (y, x)
    mask = np.array([[True, True, False]])
    out = np.asarray(draw_detections(image, boxes, [0], [0.9], ["a"], keypoints=keypoints,
                                     keypoint_mask=mask, edges=[(0, 1), (1, 2)]))
    assert out[15, 15].any() and out[45, 65].any()  # the two asked for
    assert out[30, 40].any()  # on the edge 0-1 (the line from (15, 15) to (45, 65))
    assert not out[40, 20].any() and not out[42, 42].any()  # keypoint 2 and edge 1-2 are not
    plain = np.asarray(draw_detections(image, boxes, [0], [0.9], ["a"]))
    assert not plain[30, 40].any()
