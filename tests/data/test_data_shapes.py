"""The synthetic shapes generator: determinism, annotation sanity, reuse of existing output."""

import json

import numpy as np
import pytest
from PIL import Image

from jaxdet.data.shapes import SHAPE_NAMES, generate_shapes, render_shapes_image


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes(tmp_path):
    a = generate_shapes(tmp_path / "a", 6, image_size=(40, 56), seed=11)
    generate_shapes(tmp_path / "b", 6, image_size=(40, 56), seed=11)
    assert a.name == "annotations.json"
    files_a, files_b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert len(files_a) == 6 + 2  # images + annotations.json + params.json
    assert files_a == files_b


def test_different_seed_differs(tmp_path):
    generate_shapes(tmp_path / "a", 3, image_size=(40, 40), seed=1)
    generate_shapes(tmp_path / "b", 3, image_size=(40, 40), seed=2)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a["images/000000.jpg"] != b["images/000000.jpg"]


def test_annotations_are_sane(shapes_dir):
    data = json.loads((shapes_dir / "annotations.json").read_text())
    assert data["categories"] == [
        {"id": i + 1, "name": SHAPE_NAMES[i], "supercategory": "shape"} for i in range(3)]
    assert [im["id"] for im in data["images"]] == list(range(1, 13))
    images = {im["id"]: im for im in data["images"]}
    assert data["annotations"], "some objects are drawn"
    ann_ids = [a["id"] for a in data["annotations"]]
    assert len(set(ann_ids)) == len(ann_ids)
    for im in data["images"]:
        assert 48 <= im["height"] <= 64 and 48 <= im["width"] <= 64
        with Image.open(shapes_dir / "images" / im["file_name"]) as pil:
            assert pil.size == (im["width"], im["height"]) and pil.mode == "RGB"
    for ann in data["annotations"]:
        im = images[ann["image_id"]]
        x, y, w, h = ann["bbox"]
        assert w > 0 and h > 0 and x >= 0 and y >= 0
        assert x + w <= im["width"] and y + h <= im["height"]
        assert 1 <= ann["category_id"] <= 3 and ann["iscrowd"] == 0
        assert 0 < ann["area"] <= w * h


def test_boxes_are_tight_and_shapes_visible():
    rng = np.random.default_rng(0)
    for _ in range(10):
        image, objects = render_shapes_image(rng, 64, 80, 6, max_objects=6)
        for obj in objects:
            x0, y0, x1, y1 = obj["box_xyxy"]
            colour = obj["colour"]
            near = np.abs(image.astype(np.float32) - colour).max(axis=-1) < 30
            # the object's colour shows up inside its box (>= 30% of its area is visible)
            assert near[y0:y1, x0:x1].sum() >= 0.3 * obj["area"] * 0.7


def test_size_range_and_classes(tmp_path):
    path = generate_shapes(tmp_path, 8, image_size=((32, 48), (64, 80)), seed=0,
                           num_classes=8, min_size_frac=0.1, max_size_frac=0.3,
                           image_format="png")
    data = json.loads(path.read_text())
    assert len(data["categories"]) == 8
    assert all(im["file_name"].endswith(".png") for im in data["images"])
    assert all(32 <= im["height"] <= 48 and 64 <= im["width"] <= 80 for im in data["images"])


def test_reuses_existing_output(tmp_path):
    path = generate_shapes(tmp_path, 4, image_size=(32, 32), seed=5)
    stamp = (tmp_path / "params.json").stat().st_mtime_ns
    image_mtime = (tmp_path / "images" / "000000.jpg").stat().st_mtime_ns
    assert generate_shapes(tmp_path, 4, image_size=(32, 32), seed=5) == path
    assert (tmp_path / "params.json").stat().st_mtime_ns == stamp
    assert (tmp_path / "images" / "000000.jpg").stat().st_mtime_ns == image_mtime
    # other parameters regenerate (and stale images go away)
    generate_shapes(tmp_path, 2, image_size=(32, 32), seed=5)
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == ["000000.jpg",
                                                                        "000001.jpg"]
    assert len(json.loads(path.read_text())["images"]) == 2


def test_regenerates_when_an_image_is_missing(tmp_path):
    generate_shapes(tmp_path, 3, image_size=(32, 32), seed=5)
    before = (tmp_path / "images" / "000001.jpg").read_bytes()
    (tmp_path / "images" / "000001.jpg").unlink()
    generate_shapes(tmp_path, 3, image_size=(32, 32), seed=5)
    assert (tmp_path / "images" / "000001.jpg").read_bytes() == before


def test_rejects_bad_parameters(tmp_path):
    with pytest.raises(ValueError, match="num_classes"):
        generate_shapes(tmp_path, 2, seed=0, num_classes=len(SHAPE_NAMES) + 1)
    with pytest.raises(ValueError, match="image_format"):
        generate_shapes(tmp_path, 2, seed=0, image_format="gif")
