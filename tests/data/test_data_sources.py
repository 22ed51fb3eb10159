"""COCO JSON and Pascal VOC XML sources."""

import json
import logging

import numpy as np
import pytest
from PIL import Image

from jaxdet.data.coco import CocoSource
from jaxdet.data.voc import VOC_CLASSES, VocSource


def test_coco_source_on_shapes(shapes_dir):
    source = CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")
    data = json.loads((shapes_dir / "annotations.json").read_text())
    assert len(source) == 12 and source.num_classes == 3
    assert source.category_names == ["circle", "square", "triangle"]
    assert source.category_ids == [1, 2, 3]
    assert source.ground_truth() == data
    n_boxes = 0
    for i in range(len(source)):
        r = source[i]
        assert r["boxes"].dtype == np.float32 and r["classes"].dtype == np.int32
        assert r["is_crowd"].dtype == bool and not r["is_crowd"].any()
        assert (r["boxes"][:, 2:] <= [r["height"], r["width"]]).all()
        assert (r["boxes"] >= 0).all()
        n_boxes += len(r["boxes"])
    assert n_boxes == len(data["annotations"])
    first = data["annotations"][0]
    r = source[[im["id"] for im in data["images"]].index(first["image_id"])]
    x, y, w, h = first["bbox"]
    np.testing.assert_allclose(r["boxes"][0], [y, x, y + h, x + w])
    assert r["classes"][0] == first["category_id"] - 1


@pytest.fixture
def messy_coco(tmp_path):
    data = {
        "images": [
            {"id": 10, "file_name": "a.jpg", "height": 20, "width": 30},
            {"id": 11, "file_name": "b.jpg", "height": 40, "width": 40},
            {"id": 12, "file_name": "empty.jpg", "height": 8, "width": 8},
        ],
        # non-contiguous ids, given out of order
        "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": 3, "bbox": [1, 2, 10, 5], "iscrowd": 0},
            {"id": 2, "image_id": 10, "category_id": 7, "bbox": [25, 15, 10, 10], "iscrowd": 1},
            {"id": 3, "image_id": 10, "category_id": 7, "bbox": [5, 5, 0, 4]},  # w = 0
            {"id": 4, "image_id": 11, "category_id": 99, "bbox": [1, 1, 5, 5]},  # unknown cat
            {"id": 5, "image_id": 11, "category_id": 3, "bbox": [1, 1, 5, -2]},  # h < 0
            {"id": 6, "image_id": 999, "category_id": 3, "bbox": [1, 1, 5, 5]},  # no image
            {"id": 7, "image_id": 11, "category_id": 7, "bbox": [50, 50, 5, 5]},  # outside
            {"id": 8, "image_id": 11, "category_id": 7, "bbox": [3, 4, 5, 6]},
        ],
    }
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    return path


def test_coco_validation_and_repairs(messy_coco, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = CocoSource(messy_coco, tmp_path)
    assert source.category_ids == [3, 7] and source.category_names == ["cat", "dog"]
    assert len(source) == 3
    a, b, empty = source[0], source[1], source[2]
    assert a["image_id"] == 10 and a["image_path"] == str(tmp_path / "a.jpg")
    assert (a["height"], a["width"]) == (20, 30)
    # [x, y, w, h] -> (ymin, xmin, ymax, xmax); the crowd box is clipped to the 30x20 image
    np.testing.assert_allclose(a["boxes"], [[2, 1, 7, 11], [15, 25, 20, 30]])
    np.testing.assert_array_equal(a["classes"], [0, 1])
    np.testing.assert_array_equal(a["is_crowd"], [False, True])
    np.testing.assert_allclose(b["boxes"], [[4, 3, 10, 8]])
    np.testing.assert_array_equal(b["classes"], [1])
    assert empty["boxes"].shape == (0, 4) and empty["classes"].shape == (0,)
    assert source.skips.as_dict() == {
        "degenerate_box": 2, "unknown_category": 1, "annotation_for_unknown_image": 1,
        "box_outside_image": 1, "box_clipped": 1,
    }
    messages = [r.getMessage() for r in caplog.records]
    assert any("degenerate_box" in m and "ann.json" in m and "annotation id 3" in m
               for m in messages)
    assert any("unknown_category" in m and "annotation id 4" in m for m in messages)


def test_coco_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        CocoSource(tmp_path / "nope.json", tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        CocoSource(tmp_path / "bad.json", tmp_path)
    (tmp_path / "noimg.json").write_text(json.dumps({"categories": []}))
    with pytest.raises(ValueError, match="'images'"):
        CocoSource(tmp_path / "noimg.json", tmp_path)


def _write_voc(root, objects_per_image, sizes=None):
    (root / "Annotations").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    for k, objects in enumerate(objects_per_image):
        stem = f"2008_{k:06d}"
        height, width = (sizes or {}).get(k, (30, 40))
        Image.new("RGB", (width, height), (k * 40, 90, 120)).save(
            root / "JPEGImages" / f"{stem}.jpg")
        xml_objects = "".join(
            f"<object><name>{name}</name><pose>Left</pose><truncated>0</truncated>"
            f"<difficult>{int(difficult)}</difficult><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
            f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for name, (x0, y0, x1, y1), difficult in objects
        )
        size = "" if k in (sizes or {}) else (
            f"<size><width>{width}</width><height>{height}</height><depth>3</depth></size>")
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><folder>VOC2012</folder><filename>{stem}.jpg</filename>{size}"
            f"{xml_objects}</annotation>")


def test_voc_source(tmp_path):
    _write_voc(tmp_path, [
        [("dog", (1, 1, 10, 20), False), ("person", (5, 6, 40, 30), True)],
        [],
        [("cat", (3, 4, 5, 8), False), ("cat", (8, 8, 7, 9), False)],  # second: xmax < xmin
    ], sizes={2: (16, 24)})  # image 2 has no <size>: read from the file
    source = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages")
    assert source.category_names == list(VOC_CLASSES) and source.num_classes == 20
    assert len(source) == 3
    r = source[0]
    assert r["image_path"] == str(tmp_path / "JPEGImages" / "2008_000000.jpg")
    assert (r["height"], r["width"], r["image_id"]) == (30, 40, 1)
    # 1-based inclusive corners -> continuous pixel (ymin - 1, xmin - 1, ymax, xmax)
    np.testing.assert_allclose(r["boxes"], [[0, 0, 20, 10], [5, 4, 30, 40]])
    np.testing.assert_array_equal(r["classes"], [VOC_CLASSES.index("dog"),
                                                 VOC_CLASSES.index("person")])
    np.testing.assert_array_equal(r["is_crowd"], [False, True])
    assert source[1]["boxes"].shape == (0, 4)
    assert (source[2]["height"], source[2]["width"]) == (16, 24)
    assert len(source[2]["boxes"]) == 1 and source.skips["degenerate_box"] == 1

    gt = source.ground_truth()
    assert [c["id"] for c in gt["categories"]] == list(range(1, 21))
    assert [im["id"] for im in gt["images"]] == [1, 2, 3]
    person = [a for a in gt["annotations"] if a["iscrowd"]]
    assert len(person) == 1
    assert person[0]["category_id"] == VOC_CLASSES.index("person") + 1
    assert person[0]["bbox"] == [4.0, 5.0, 36.0, 25.0]


def test_voc_ground_truth_works_with_pycocotools(tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    _write_voc(tmp_path, [[("dog", (1, 1, 10, 20), False)], [("cat", (3, 4, 30, 28), False)]])
    source = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages")
    coco = COCO()
    coco.dataset = source.ground_truth()
    coco.createIndex()
    dets = [{"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"],
             "score": 1.0} for a in coco.dataset["annotations"]]
    evaluator = COCOeval(coco, coco.loadRes(dets), "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    assert evaluator.stats[0] == pytest.approx(1.0)


def test_voc_custom_classes_and_image_set(tmp_path):
    _write_voc(tmp_path, [[("dog", (1, 1, 10, 20), False), ("zebra", (2, 2, 5, 5), False)],
                          [("cat", (3, 4, 5, 8), False)]])
    (tmp_path / "train.txt").write_text("2008_000001\n")
    source = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages", ["cat", "dog"])
    assert source.category_names == ["cat", "dog"] and source.category_ids == [1, 2]
    np.testing.assert_array_equal(source[0]["classes"], [1])
    assert source.skips["unknown_category"] == 1
    subset = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages", ["cat", "dog"],
                       image_set=tmp_path / "train.txt")
    assert len(subset) == 1 and subset[0]["image_path"].endswith("2008_000001.jpg")
    # names outside the VOC list: the sorted names found
    found = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages")
    assert found.category_names == ["cat", "dog", "zebra"]


def test_coco_class_index_id_minus_one_keeps_the_id_gaps(tmp_path):
    """TF label-map numbering: class = category id - 1, unused ids become classes id_<n>."""
    import json as _json

    from PIL import Image as _Image

    from jaxdet.data.coco import CocoSource

    _Image.new("RGB", (20, 10)).save(tmp_path / "a.png")
    (tmp_path / "ann.json").write_text(_json.dumps({
        "images": [{"id": 5, "file_name": "a.png", "height": 10, "width": 20}],
        "categories": [{"id": 3, "name": "cat"}, {"id": 1, "name": "person"}],
        "annotations": [{"id": 1, "image_id": 5, "category_id": 3, "bbox": [1, 1, 4, 4]}]}))
    contiguous = CocoSource(tmp_path / "ann.json", tmp_path)
    assert contiguous.category_ids == [1, 3] and contiguous[0]["classes"].tolist() == [1]
    by_id = CocoSource(tmp_path / "ann.json", tmp_path, class_index="id_minus_one")
    assert by_id.category_ids == [1, 2, 3]
    assert by_id.category_names == ["person", "id_2", "cat"]
    assert by_id[0]["classes"].tolist() == [2]
    # torchvision's numbering (91-class COCO detectors): class = category id, from 0
    torchvision = CocoSource(tmp_path / "ann.json", tmp_path, class_index="id")
    assert torchvision.category_ids == [0, 1, 2, 3]
    assert torchvision.category_names == ["id_0", "person", "id_2", "cat"]
    assert torchvision[0]["classes"].tolist() == [3]
