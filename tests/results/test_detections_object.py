"""``Detections`` as a notebook result object: indexing, slicing, masks, iteration over
``Detection``, the one-line repr, the drawn PNG, pandas, height / width. Hand-built detections
(no model): four objects in an 8 x 10 (h x w) image."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from PIL import Image

import jaxdet
from jaxdet.data.keypoints import KeypointLayout
from jaxdet.results.detections import Detection, Detections
from jaxdet.results.labels import Labels

# class index 0 "person" (id 1) has keypoints in slots 0..1, 1 "car" (id 3) none, 2 "dog"
# (id 18) in slot 2
LABELS = Labels((1, 3, 18), ("person", "car", "dog"), KeypointLayout.from_groups(
    [(0, "person", ("nose", "neck"), ((0, 1),)), (2, "dog", ("tail",))]))
HEIGHT, WIDTH = 8, 10
BOXES = np.array([[1.0, 2.0, 5.0, 6.0], [0.5, 0.25, 9.5, 7.75], [3.0, 1.0, 4.0, 2.0],
                  [6.125, 4.0, 10.0, 8.0]], np.float32)
SCORES = np.array([0.97, 0.88, 0.75, 0.25], np.float32)
CLASSES = np.array([0, 2, 0, 1], np.int32)


def _masks() -> np.ndarray:
    masks = np.zeros((4, HEIGHT, WIDTH), np.uint8)
    for i, (x0, y0, x1, y1) in enumerate(BOXES.astype(int)):
        masks[i, y0:y1, x0:x1] = 1
    return masks


def _keypoints() -> np.ndarray:  # [4, K=3, 3] (x, y, score): detection i, slot k = (i, k, .5)
    points = np.zeros((4, 3, 3), np.float32)
    for i in range(4):
        for k in range(3):
            points[i, k] = (i + 0.5, k + 0.25, 0.5 + 0.125 * k)
    return points


def _found(**changes) -> Detections:
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    image[..., 1] = 200
    fields = dict(boxes=BOXES.copy(), scores=SCORES.copy(), classes=CLASSES.copy(),
                  labels=LABELS, image_size=(HEIGHT, WIDTH), masks=_masks(),
                  keypoints=_keypoints(), source="photos/cat.jpg", image=image)
    fields.update(changes)
    return Detections(**fields)


def test_integer_and_negative_index_give_one_detection():
    found = _found()
    first = found[0]
    assert isinstance(first, Detection)
    np.testing.assert_array_equal(first.box, [1.0, 2.0, 5.0, 6.0])
    assert first.box.dtype == np.float32 and first.box.shape == (4,)
    assert first.score == pytest.approx(0.97) and isinstance(first.score, float)
    assert (first.class_index, first.class_id, first.class_name) == (0, 1, "person")
    np.testing.assert_array_equal(first.mask, _masks()[0])
    np.testing.assert_array_equal(first.keypoints, _keypoints()[0])
    assert first.keypoint_slots == (0, 1)
    last = found[-1]
    assert (last.class_index, last.class_id, last.class_name) == (1, 3, "car")
    assert last.keypoint_slots is None  # cars have no keypoints
    np.testing.assert_array_equal(last.box, [6.125, 4.0, 10.0, 8.0])
    assert found[np.int64(1)].class_name == "dog" and found[-4].class_name == "person"
    for bad in (4, -5):
        with pytest.raises(IndexError, match="out of range for 4 detections"):
            found[bad]


def test_slices_lists_and_integer_arrays_give_new_detections():
    found = _found()
    head = found[:2]
    assert isinstance(head, Detections) and len(head) == 2
    np.testing.assert_array_equal(head.boxes, BOXES[:2])
    np.testing.assert_array_equal(head.scores, SCORES[:2])
    np.testing.assert_array_equal(head.classes, [0, 2])
    picked = found[[3, 0]]
    assert picked.class_names == ["car", "person"]
    np.testing.assert_array_equal(picked.masks, _masks()[[3, 0]])
    np.testing.assert_array_equal(picked.keypoints, _keypoints()[[3, 0]])
    assert found[np.array([-1])].class_names == ["car"]
    assert len(found[[]]) == 0 and len(found[10:]) == 0
    assert found[::-1].class_names == ["car", "person", "dog", "person"]
    # kept alike: labels, source, image, size; the original is unchanged and not shared
    assert head.labels is LABELS and head.source == "photos/cat.jpg"
    assert head.image is found.image and head.image_size == (HEIGHT, WIDTH)
    head.boxes[0, 0] = 99.0
    assert found.boxes[0, 0] == 1.0
    with pytest.raises(IndexError, match="out of range for 4 detections"):
        found[[0, 4]]


def test_boolean_mask_filters_masks_and_keypoints_alike():
    found = _found()
    kept = found[found.scores > 0.8]
    assert len(kept) == 2 and kept.class_names == ["person", "dog"]
    np.testing.assert_array_equal(kept.boxes, BOXES[:2])
    np.testing.assert_array_equal(kept.masks, _masks()[:2])
    np.testing.assert_array_equal(kept.keypoints, _keypoints()[:2])
    middle = found[[False, True, True, False]]
    assert middle.class_names == ["dog", "person"]
    np.testing.assert_array_equal(middle.masks, _masks()[1:3])
    np.testing.assert_array_equal(middle.keypoints, _keypoints()[1:3])
    # above() is the same filter (>=)
    above = found.above(0.75)
    assert above.class_names == ["person", "dog", "person"]
    np.testing.assert_array_equal(above.masks, _masks()[:3])
    plain = _found(masks=None, keypoints=None)[np.array([True, False, True, False])]
    assert plain.masks is None and plain.keypoints is None
    assert plain.class_names == ["person", "person"]


def test_bad_masks_and_keys_name_the_length():
    found = _found()
    with pytest.raises(IndexError, match="boolean mask of length 3 for 4 detections"):
        found[np.array([True, False, True])]
    with pytest.raises(IndexError, match="1-D"):
        found[np.ones((2, 2), bool)]
    for bad, kind in ((1.5, "float"), ("person", "str"), ((0, 1), "tuple"), (True, "bool")):
        with pytest.raises(TypeError, match=f"boolean masks of length 4, not {kind}"):
            found[bad]
    with pytest.raises(TypeError, match="integers or booleans, not float64"):
        found[np.array([0.0, 1.0])]


def test_iteration_yields_detections_whose_dicts_are_the_rows_of_to_dict():
    found = _found()
    items = list(found)
    assert [d.class_name for d in items] == ["person", "dog", "person", "car"]
    assert [d.class_id for d in items] == [1, 18, 1, 3]
    rows = found.to_dict()["detections"]
    assert [d.to_dict() for d in items] == rows
    assert rows[0]["bbox"] == [1.0, 2.0, 4.0, 4.0]
    assert rows[0]["box_xyxy"] == [1.0, 2.0, 5.0, 6.0]
    assert rows[3]["bbox"] == [6.12, 4.0, 3.88, 4.0]  # 6.125 -> 6.12 (COCO rounding)
    assert rows[0]["score"] == 0.97  # float32 0.97 rounded to 6 decimals
    # person: slots 0, 1 of detection 0 = (0.5, 0.25, 0.5), (0.5, 1.25, 0.625); dog: slot 2
    assert rows[0]["keypoints"] == [0.5, 0.25, 0.5, 0.5, 1.25, 0.625]
    assert rows[1]["keypoints"] == [1.5, 2.25, 0.75]
    assert "keypoints" not in rows[3]
    assert rows[0]["segmentation"]["size"] == [HEIGHT, WIDTH]
    plain = _found(masks=None, keypoints=None)
    assert [d.to_dict() for d in plain] == plain.to_dict()["detections"]
    assert list(found[:0]) == []


def test_reprs_are_one_line_and_name_the_best():
    found = _found()
    assert repr(found) == ("Detections(4 objects in 8x10 (h x w) image 'photos/cat.jpg': "
                           "person 0.97, dog 0.88, person 0.75, ...)")
    assert repr(found[:1]) == ("Detections(1 object in 8x10 (h x w) image "
                               "'photos/cat.jpg': person 0.97)")
    assert repr(_found(source=None)[:0]) == "Detections(0 objects in 8x10 (h x w) image)"
    # not in score order: the best are still named first
    assert repr(found[[3, 2, 1]]).endswith(": dog 0.88, person 0.75, car 0.25)")
    assert repr(found[0]) == "Detection(person 0.97 box=(1.0, 2.0, 5.0, 6.0))"
    assert repr(found[3]) == "Detection(car 0.25 box=(6.1, 4.0, 10.0, 8.0))"
    many = _found(boxes=np.tile(BOXES, (13, 1)), scores=np.tile(SCORES, 13),
                  classes=np.tile(CLASSES, 13), masks=None, keypoints=None,
                  source="a\nb.jpg")
    assert "\n" not in repr(many) and repr(many).startswith("Detections(52 objects")
    assert found == found and found != _found()  # identity equality, as before


def test_height_width_and_size_errors_say_h_x_w():
    found = _found()
    assert (found.height, found.width) == (HEIGHT, WIDTH) == found.image_size
    assert found.to_dict()["height"] == HEIGHT and found.to_dict()["width"] == WIDTH
    with pytest.raises(ValueError, match=r"10x8 \(h x w\) for detections of a 8x10 \(h x w\)"):
        found.draw(image=np.zeros((WIDTH, HEIGHT, 3), np.uint8))


def test_repr_png_is_the_drawn_image_or_none():
    found = _found()
    png = found._repr_png_()
    assert isinstance(png, bytes)
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG" and picture.size == (WIDTH, HEIGHT)
    assert np.asarray(picture.convert("RGB")).shape == (HEIGHT, WIDTH, 3)
    assert _found(image=None)._repr_png_() is None
    # a display never raises: an image of the wrong size draws nothing
    broken = _found(image=np.zeros((3, 3, 3), np.uint8))
    assert broken._repr_png_() is None
    html = found._repr_html_()
    assert "<table>" in html and "data:image/png;base64," in html
    assert html.count("<tr>") == 1 + 4 and "photos/cat.jpg" in html
    text_only = _found(image=None)._repr_html_()
    assert "<img" not in text_only and "person" in text_only


def test_to_pandas_columns_and_values():
    pandas = pytest.importorskip("pandas")
    frame = _found().to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame.columns) == ["x0", "y0", "x1", "y1", "score", "class_id", "class_name"]
    np.testing.assert_array_equal(frame[["x0", "y0", "x1", "y1"]].to_numpy(), BOXES)
    np.testing.assert_array_equal(frame["score"].to_numpy(), SCORES)
    assert frame["x0"].dtype == np.float64 and frame["class_id"].dtype == np.int64
    assert frame["class_id"].tolist() == [1, 18, 1, 3]
    assert frame["class_name"].tolist() == ["person", "dog", "person", "car"]
    assert len(_found()[:0].to_pandas()) == 0


def test_to_pandas_without_pandas_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        _found().to_pandas()


def test_detection_is_exported_from_the_package_root():
    assert jaxdet.Detection is Detection and "Detection" in jaxdet.__all__
