"""No silent wrong labels from COCO files: duplicate image ids drop every image of the id with
its boxes; duplicate annotation ids are named; an annotated size that differs from the file is
named per file, with the EXIF orientation when that explains it."""

import json
import logging

import numpy as np
from PIL import Image

from jaxdet.data import annotated_size
from jaxdet.data.coco import CocoSource
from jaxdet.data.sample_pipeline import _Pipeline


def _write(tmp_path, images, annotations, files):
    (tmp_path / "images").mkdir()
    for name, (w, h, exif) in files.items():
        kwargs = {}
        if exif:
            tags = Image.Exif()
            tags[0x0112] = exif
            kwargs["exif"] = tags
        Image.new("RGB", (w, h), (120, 60, 30)).save(tmp_path / "images" / name, **kwargs)
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 1, "name": "thing"}]}))
    return CocoSource(path, tmp_path / "images")


def _image(i, name, w=40, h=30):
    return {"id": i, "file_name": name, "width": w, "height": h}


def _box(ann_id, image_id, xywh=(2, 2, 10, 10)):
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": list(xywh)}


def test_a_duplicate_image_id_drops_every_image_of_it_and_its_boxes(tmp_path, caplog):
    files = {"a.jpg": (40, 30, None), "b.jpg": (40, 30, None), "c.jpg": (40, 30, None)}
    with caplog.at_level(logging.WARNING):
        source = _write(tmp_path, [_image(1, "a.jpg"), _image(1, "b.jpg"), _image(2, "c.jpg")],
                        [_box(10, 1), _box(11, 1), _box(12, 2)], files)
    assert source.image_ids == [2] and len(source[0]["boxes"]) == 1
    assert source.skips["duplicate_image_id"] == 2
    assert source.skips["annotation_of_duplicate_image_id"] == 2
    assert "a.jpg, b.jpg have this id" in caplog.text


def test_duplicate_annotation_ids_are_named_and_kept(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        source = _write(tmp_path, [_image(1, "a.jpg")], [_box(7, 1), _box(7, 1, (5, 5, 8, 8))],
                        {"a.jpg": (40, 30, None)})
    assert len(source[0]["boxes"]) == 2
    assert source.skips["duplicate_annotation_id"] == 1
    assert "annotation id 7" in caplog.text


def _process(source, index=0):
    pipeline = _Pipeline(source, (), max_boxes=4, image_dtype="uint8")
    return pipeline.process(index, np.random.default_rng(0))


def test_an_annotated_size_other_than_the_files_is_named(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(annotated_size, "_warned", set())
    source = _write(tmp_path, [_image(1, "a.jpg", 80, 60)], [_box(1, 1, (8, 6, 40, 30))],
                    {"a.jpg": (40, 30, None)})
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        sample = _process(source)
        _process(source)  # once per file
    assert caplog.text.count("a.jpg") == 1
    assert "annotated as 80x60, decodes to 40x30" in caplog.text and "EXIF" not in caplog.text
    # the boxes are relative to the annotated size: the same fractions of the decoded image
    np.testing.assert_allclose(sample["boxes"][0], [0.1, 0.1, 0.6, 0.6], atol=1e-6)


def test_a_rotated_exif_photo_labelled_as_displayed_is_explained(tmp_path, caplog,
                                                                  monkeypatch):
    monkeypatch.setattr(annotated_size, "_warned", set())
    # stored 30 wide, 40 high, EXIF 6 (displayed 40x30); the labels were made on the display
    source = _write(tmp_path, [_image(1, "phone.jpg", 40, 30)], [_box(1, 1)],
                    {"phone.jpg": (30, 40, 6)})
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        _process(source)
    assert "annotated as 40x30, decodes to 30x40" in caplog.text
    assert "EXIF orientation is 6" in caplog.text
