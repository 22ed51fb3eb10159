"""Bad input: every case is dropped, repaired or converted, counted exactly, and logged naming
the file and the record (COCO JSON and Pascal VOC sources, train and eval loaders).

Workdir-mismatch and NaN-loss are covered elsewhere (tests/e2e/test_train_resume.py,
tests/train/test_loop_nan.py); generic config typos in tests/config/test_loader.py.
"""

import json
import logging

import numpy as np
import pytest
from PIL import Image, ImageFile

from jaxdet.data.coco import CocoSource
from jaxdet.data.decode import CorruptImageError, load_image
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.loader import make_train_loader
from jaxdet.data.resize import FixedShapeResizer
from jaxdet.data.voc import VocSource
from jaxdet.eval.coco_eval import CocoEvaluator

OPS = [FixedShapeResizer(16, 16)]
H, W = 20, 24  # every generated image is 24 wide, 20 high
CATEGORIES = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def _noise_jpeg(path, size=64):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)


def _half_jpeg(path):
    """A JPEG cut in half (Pillow would grey-fill the rest if truncated images were allowed)."""
    _noise_jpeg(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _coco(root, images, annotations, categories=CATEGORIES, write_images=True):
    """Writes ann.json; ``images``: (id, file_name) pairs, each a 24x20 RGB JPEG unless the
    file already exists or the name starts with 'missing'."""
    (root / "images").mkdir(exist_ok=True)
    entries = []
    for image_id, name in images:
        path = root / "images" / name
        if write_images and not path.exists() and not name.startswith("missing"):
            Image.new("RGB", (W, H), (200, 60, 30)).save(path)
        entries.append({"id": image_id, "file_name": name, "height": H, "width": W})
    for k, ann in enumerate(annotations):
        ann.setdefault("id", k + 1)
        ann.setdefault("category_id", 1)
    path = root / "ann.json"
    path.write_text(json.dumps({"images": entries, "annotations": annotations,
                                "categories": list(categories)}))  # NaN/Infinity allowed
    return path


def _voc(root, images):
    """``images``: (stem, objects, write_image) with objects (name, (xmin, ymin, xmax, ymax))."""
    (root / "Annotations").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    for stem, objects, write_image in images:
        if write_image:
            Image.new("RGB", (W, H), (20, 90, 120)).save(root / "JPEGImages" / f"{stem}.jpg")
        xml = "".join(
            f"<object><name>{name}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
            f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for name, (x0, y0, x1, y1) in objects)
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.jpg</filename><size><width>{W}</width>"
            f"<height>{H}</height><depth>3</depth></size>{xml}</annotation>")
    return root / "Annotations", root / "JPEGImages"


def _logged(caplog, *parts):
    """How many log lines contain every one of ``parts``."""
    return sum(all(p in r.getMessage() for p in parts) for r in caplog.records)


def _take(it, n):
    return [next(it) for _ in range(n)]


# --------------------------------------------------------------------------- image files


def test_missing_image_is_skipped_in_train_and_eval(tmp_path, caplog):
    ann = _coco(tmp_path, [(1, "a.jpg"), (2, "missing.jpg"), (3, "c.jpg"), (4, "d.jpg")],
                [{"image_id": i, "bbox": [1, 1, 5, 5]} for i in (1, 2, 3, 4)])
    source = CocoSource(ann, tmp_path / "images")
    missing = str(tmp_path / "images" / "missing.jpg")
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        it = make_train_loader(source, OPS, batch_size=3, max_boxes=2, seed=0, shuffle=False)
        ids = [b["image_id"].tolist() for b in _take(it, 2)]  # two epochs of 3 readable
    assert ids == [[1, 3, 4], [1, 3, 4]]
    assert it.stats == {"corrupt_image": 2, "num_truncated": 0}  # counted every epoch
    assert _logged(caplog, "corrupt_image", missing, "image id 2", "file not found") == 1

    caplog.clear()
    loader = make_eval_loader(source, OPS, batch_size=3, max_boxes=2)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        batches = list(loader)
    mask = np.concatenate([b["mask"] for b in batches]).tolist()
    assert mask == [True, False, True, True, False, False]
    assert loader.stats == {"corrupt_image": 1, "num_truncated": 0}
    assert loader.skipped_image_ids == [2]
    assert _logged(caplog, "corrupt_image", missing, "image id 2") == 1
    assert _logged(caplog, "1 of 4 images could not be read", "left out") == 1


def test_truncated_jpeg_is_detected_not_grey_filled(tmp_path, monkeypatch, caplog):
    _half_jpeg(tmp_path / "half.jpg")
    with pytest.raises(CorruptImageError, match="truncated") as e:
        load_image(tmp_path / "half.jpg")
    assert e.value.path == str(tmp_path / "half.jpg")
    # even if some other code allowed truncated images globally, a short JPEG is caught
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        with pytest.raises(CorruptImageError, match="truncated"):
            load_image(tmp_path / "half.jpg")
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", False)

    (tmp_path / "images").mkdir()
    _half_jpeg(tmp_path / "images" / "b.jpg")
    ann = _coco(tmp_path, [(1, "a.jpg"), (2, "b.jpg")],
                [{"image_id": 1, "bbox": [1, 1, 5, 5]}, {"image_id": 2, "bbox": [1, 1, 5, 5]}])
    source = CocoSource(ann, tmp_path / "images")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        it = make_train_loader(source, OPS, batch_size=2, max_boxes=2, seed=0, shuffle=False)
        assert next(it)["image_id"].tolist() == [1, 1]
    assert it.skips.as_dict() == {"corrupt_image": 1}
    assert _logged(caplog, str(tmp_path / "images" / "b.jpg"), "image id 2", "truncated") == 1


def _palette(transparent: bool) -> Image.Image:
    image = Image.new("P", (3, 2), 1)
    image.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    if transparent:
        image.info["transparency"] = 1
    return image


# (file name, image, expected RGB of pixel (0, 0), tolerance): values computed by hand
MODES = [
    ("l.png", Image.new("L", (3, 2), 77), (77, 77, 77), 0),
    ("la.png", Image.new("LA", (3, 2), (77, 0)), (77, 77, 77), 0),  # alpha dropped
    ("p.png", _palette(False), (200, 100, 50), 0),
    ("pt.png", _palette(True), (200, 100, 50), 0),  # transparent entry: its colour, no alpha
    ("rgba.png", Image.new("RGBA", (3, 2), (10, 20, 30, 0)), (10, 20, 30), 0),
    ("cyan.tif", Image.new("CMYK", (3, 2), (255, 0, 0, 0)), (0, 255, 255), 0),
    ("k50.tif", Image.new("CMYK", (3, 2), (0, 0, 0, 128)), (127, 127, 127), 0),  # 255 - 128
    ("red.jpg", Image.new("CMYK", (8, 8), (0, 255, 255, 0)), (255, 0, 0), 4),  # CMYK JPEG
]


@pytest.mark.parametrize("name,image,expected,tol", MODES, ids=[m[0] for m in MODES])
def test_image_modes_become_rgb_uint8(tmp_path, name, image, expected, tol):
    image.save(tmp_path / name)
    out = load_image(tmp_path / name)
    assert out.dtype == np.uint8 and out.shape == (image.height, image.width, 3)
    np.testing.assert_allclose(out.reshape(-1, 3).astype(int), [expected] * out[..., 0].size,
                               atol=tol)


def test_16_bit_png_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 32768, 65535], [1000, 12850, 40000, 65278]], np.uint16)
    Image.fromarray(values).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    out = load_image(tmp_path / "g16.png")
    # v * 255 / 65535 = v / 257, rounded: 1000 -> 3.9, 12850 -> 50, 40000 -> 155.6, 65278 -> 254
    expected = [[0, 1, 128, 255], [4, 50, 156, 254]]
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], expected)


# --------------------------------------------------------------------------- boxes


def test_coco_bad_boxes_are_dropped_or_clipped_and_counted(tmp_path, caplog):
    nan, inf = float("nan"), float("inf")
    bboxes = {  # annotation id: [x, y, w, h] on a 24 x 20 image
        1: [3, 2, 6, 5],        # kept
        2: [10, 3, -4, 5],      # xmax < xmin
        3: [2, 10, 5, -3],      # ymax < ymin
        4: [2, 2, 0, 5],        # zero area
        5: [2, 2, 5, 0],        # zero area
        6: [30, 2, 5, 5],       # entirely outside (x >= 24)
        7: [20, 15, 10, 10],    # partly outside: clipped to x 20..24, y 15..20
        8: [nan, 1, 2, 3],      # NaN
        9: [1, 1, inf, 3],      # inf
        10: [-3, -2, 6, 5],     # partly outside: clipped to x 0..3, y 0..3
    }
    ann = _coco(tmp_path, [(1, "a.jpg")],
                [{"id": k, "image_id": 1, "bbox": b} for k, b in bboxes.items()])
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = CocoSource(ann, tmp_path / "images")
    assert source.skips.as_dict() == {"degenerate_box": 6, "box_outside_image": 1,
                                      "box_clipped": 2}
    np.testing.assert_allclose(source[0]["boxes"], [[2, 3, 7, 9], [15, 20, 20, 24],
                                                    [0, 0, 3, 3]])
    for k, reason in [(2, "degenerate_box"), (3, "degenerate_box"), (4, "degenerate_box"),
                      (5, "degenerate_box"), (6, "box_outside_image"), (7, "box_clipped"),
                      (8, "degenerate_box"), (9, "degenerate_box"), (10, "box_clipped")]:
        assert _logged(caplog, reason, str(ann), f"image id 1, annotation id {k}]") == 1, k
    assert _logged(caplog, "1 images, 3 boxes kept", "degenerate_box: 6") == 1
    # evaluation sees the same objects: dropped ones left out, clipped ones clipped
    gt = {a["id"]: a["bbox"] for a in source.ground_truth()["annotations"]}
    assert gt == {1: [3, 2, 6, 5], 7: [20, 15, 4, 5], 10: [0, 0, 3, 3]}


def test_voc_bad_boxes_are_dropped_or_clipped_and_counted(tmp_path, caplog):
    objects = [  # (xmin, ymin, xmax, ymax), 1-based inclusive, on a 24 x 20 image
        ("dog", (1, 1, 10, 12)),     # 0 kept -> (0, 0, 12, 10)
        ("dog", (10, 1, 5, 12)),     # 1 xmax < xmin
        ("dog", (1, 12, 10, 5)),     # 2 ymax < ymin
        ("dog", (5, 1, 4, 12)),      # 3 zero area (xmax = xmin - 1)
        ("dog", (5, 1, 5, 12)),      # 4 xmax == xmin: a 1-pixel wide box, kept
        ("dog", ("nan", 1, 5, 5)),   # 5 NaN
        ("dog", (1, 1, "inf", 5)),   # 6 inf
        ("dog", (30, 1, 40, 5)),     # 7 entirely outside
        ("dog", (20, 15, 30, 25)),   # 8 partly outside -> (14, 19, 20, 24)
        ("dog", ("abc", 1, 5, 5)),   # 9 not a number
    ]
    ann_dir, image_dir = _voc(tmp_path, [("img", objects, True)])
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = VocSource(ann_dir, image_dir)
    assert source.skips.as_dict() == {"degenerate_box": 5, "box_outside_image": 1,
                                      "box_clipped": 1, "malformed_object": 1}
    np.testing.assert_allclose(source[0]["boxes"], [[0, 0, 12, 10], [0, 4, 12, 5],
                                                    [14, 19, 20, 24]])
    xml = str(ann_dir / "img.xml")
    for k, reason in [(1, "degenerate_box"), (2, "degenerate_box"), (3, "degenerate_box"),
                      (5, "degenerate_box"), (6, "degenerate_box"), (7, "box_outside_image"),
                      (8, "box_clipped"), (9, "malformed_object")]:
        assert _logged(caplog, reason, xml, f"object {k}") == 1, k
    assert len(source.ground_truth()["annotations"]) == 3


def test_unknown_category_is_dropped_and_named(tmp_path, caplog):
    ann = _coco(tmp_path, [(1, "a.jpg")], [
        {"id": 4, "image_id": 1, "bbox": [1, 1, 5, 5], "category_id": 2},
        {"id": 5, "image_id": 1, "bbox": [1, 1, 5, 5], "category_id": 99},
        {"id": 6, "image_id": 42, "bbox": [1, 1, 5, 5]},  # an image id that does not exist
    ])
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = CocoSource(ann, tmp_path / "images")
    assert source.skips.as_dict() == {"unknown_category": 1, "annotation_for_unknown_image": 1}
    assert source[0]["classes"].tolist() == [1]
    assert _logged(caplog, "unknown_category", str(ann), "image id 1, annotation id 5",
                   "category id 99") == 1
    assert _logged(caplog, "annotation_for_unknown_image", "annotation id 6", "image id 42") == 1
    assert [a["id"] for a in source.ground_truth()["annotations"]] == [4]

    caplog.clear()
    ann_dir, image_dir = _voc(tmp_path / "voc", [
        ("img", [("dog", (1, 1, 5, 5)), ("zebra", (2, 2, 6, 6))], True)])
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        voc = VocSource(ann_dir, image_dir, class_names=["cat", "dog"])
    assert voc.skips.as_dict() == {"unknown_category": 1}
    assert voc[0]["classes"].tolist() == [1]
    assert _logged(caplog, "unknown_category", str(ann_dir / "img.xml"), "object 1",
                   "'zebra'") == 1


# --------------------------------------------------------------------------- images, counts


def test_image_without_annotations_is_trained_and_evaluated(tmp_path):
    ann = _coco(tmp_path, [(1, "a.jpg"), (2, "empty.jpg")], [{"image_id": 1, "bbox": [2, 2, 8, 8]}])
    source = CocoSource(ann, tmp_path / "images")
    batch = next(make_train_loader(source, OPS, batch_size=2, max_boxes=3, seed=0,
                                   shuffle=False))
    assert batch["image_id"].tolist() == [1, 2] and batch["mask"].all()
    assert batch["valid"].sum(1).tolist() == [1, 0]  # a negative example, not an error
    loader = make_eval_loader(source, OPS, batch_size=2, max_boxes=3)
    (batch,) = list(loader)
    assert batch["mask"].tolist() == [True, True] and loader.stats == {"num_truncated": 0}
    # the empty image is evaluated: a confident false positive on it halves AP
    evaluator = CocoEvaluator(source.ground_truth(), source.category_ids)
    boxes = np.array([[[2, 2, 10, 10]], [[2, 2, 10, 10]]], np.float32)  # yxyx pixels
    evaluator.add_detections(batch["image_id"], boxes, np.array([[0.5], [0.9]]),
                             np.zeros((2, 1), np.int32), np.array([1, 1]))
    assert evaluator.evaluate()["AP"] == pytest.approx(0.5)


def test_more_boxes_than_max_boxes_are_truncated_and_counted(tmp_path, caplog):
    ann = _coco(tmp_path, [(1, "a.jpg"), (2, "b.jpg")],
                [{"image_id": 1, "bbox": [k, k, 4, 4]} for k in range(5)]
                + [{"image_id": 2, "bbox": [1, 1, 4, 4]}])
    source = CocoSource(ann, tmp_path / "images")
    with caplog.at_level(logging.INFO, logger="jaxdet.data"):
        it = make_train_loader(source, OPS, batch_size=2, max_boxes=3, seed=0, shuffle=False)
        first, _, _ = _take(it, 3)  # 3 epochs of 2 images
    assert first["valid"].sum(1).tolist() == [3, 1]
    np.testing.assert_allclose(first["boxes"][0, :, 0] * H, [0, 1, 2], atol=1e-5)  # first 3 kept
    assert it.stats == {"too_many_boxes": 3, "num_truncated": 6}  # 2 objects, 3 times
    path = str(tmp_path / "images" / "a.jpg")
    assert _logged(caplog, "too_many_boxes", path, "image id 1",
                   "2 objects beyond max_boxes=3 dropped") == 1
    # one summary line, for the first epoch only
    assert _logged(caplog, str(ann), "epoch 0 done", "too_many_boxes: 1",
                   "2 objects beyond max_boxes=3") == 1
    assert _logged(caplog, "done") == 1
    loader = make_eval_loader(source, OPS, batch_size=2, max_boxes=3)
    list(loader)
    assert loader.num_truncated == 2 and loader.stats == {"num_truncated": 2}


def test_empty_datasets_are_one_clear_error(tmp_path):
    ann = _coco(tmp_path, [], [])
    source = CocoSource(ann, tmp_path / "images")
    for make in (make_train_loader, make_eval_loader):
        kwargs = {"seed": 0} if make is make_train_loader else {}
        with pytest.raises(ValueError, match=f"dataset {ann} has no images$"):
            make(source, OPS, batch_size=2, max_boxes=2, **kwargs)
    # every image entry dropped while parsing: the message says why
    ann.write_text(json.dumps({"images": [{"id": 1}, {"id": 2}], "categories": CATEGORIES}))
    with pytest.raises(ValueError, match="has no images; every entry was dropped: "
                                         "malformed_image_entry: 2"):
        make_train_loader(CocoSource(ann, tmp_path / "images"), OPS, batch_size=2,
                          max_boxes=2, seed=0)
    (tmp_path / "voc").mkdir()
    voc = VocSource(tmp_path / "voc", tmp_path / "images")
    with pytest.raises(ValueError, match=f"dataset {tmp_path / 'voc'} has no images"):
        make_eval_loader(voc, OPS, batch_size=2, max_boxes=2)
    # a wrong image folder is refused when the source is built
    with pytest.raises(FileNotFoundError, match="image folder not found: .*nope"):
        CocoSource(ann, tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="image folder not found: .*nope"):
        VocSource(tmp_path / "voc", tmp_path / "nope")


def test_all_images_unreadable_is_one_clear_error(tmp_path):
    ann = _coco(tmp_path, [(1, "missing1.jpg"), (2, "missing2.jpg")], [])
    source = CocoSource(ann, tmp_path / "images")
    it = make_train_loader(source, OPS, batch_size=2, max_boxes=2, seed=0)
    with pytest.raises(RuntimeError, match=f"{ann}: 2 images in a row could not be read.*"
                                           f"check the image directory {tmp_path / 'images'}"):
        next(it)
    loader = make_eval_loader(source, OPS, batch_size=2, max_boxes=2)
    with pytest.raises(RuntimeError, match="none of its 2 images could be read"):
        list(loader)


def test_data_section_typo_names_the_field():
    from jaxdet.config.loader import ConfigError, load_config

    with pytest.raises(ConfigError, match="data.max_number_of_boxe: unknown field .* Did you "
                                          "mean: max_number_of_boxes"):
        load_config("shapes_demo", ["data.max_number_of_boxe=5"])


# --------------------------------------------------------------------------- end to end


def _perfect_detections(source, batches):
    """Each real eval image's ground-truth boxes as detections with score 1."""
    evaluator = CocoEvaluator(source.ground_truth(), source.category_ids)
    records = {source[i]["image_id"]: source[i] for i in range(len(source))}
    for batch in batches:
        ids = batch["image_id"][batch["mask"]]
        d = max(1, max(len(records[i]["boxes"]) for i in ids))
        boxes, classes = np.zeros((len(ids), d, 4)), np.zeros((len(ids), d), np.int32)
        num = np.zeros(len(ids), np.int32)
        for row, i in enumerate(ids):
            n = num[row] = len(records[i]["boxes"])
            boxes[row, :n], classes[row, :n] = records[i]["boxes"], records[i]["classes"]
        evaluator.add_detections(ids, boxes, np.ones((len(ids), d)), classes, num)
    return evaluator.evaluate()


def test_coco_with_a_mix_of_bad_records_trains_and_evaluates(tmp_path, caplog):
    images = tmp_path / "images"
    images.mkdir()
    _half_jpeg(images / "truncated.jpg")
    Image.new("CMYK", (W, H), (0, 255, 255, 0)).save(images / "cmyk.jpg")
    Image.fromarray(np.full((H, W), 40000, np.uint16)).save(images / "g16.png")
    _palette(False).resize((W, H)).save(images / "palette.png")
    Image.new("RGBA", (W, H), (10, 20, 30, 0)).save(images / "rgba.png")
    files = ["a.jpg", "missing.jpg", "truncated.jpg", "cmyk.jpg", "g16.png", "palette.png",
             "many.jpg", "rgba.png"]
    good = {1: [[2, 2, 8, 8], [10, 5, 6, 9]], 2: [[1, 1, 5, 5]], 3: [[1, 1, 5, 5]],
            4: [[3, 3, 9, 9]], 5: [[0, 0, 12, 10]], 7: [[k, k, 6, 6] for k in range(5)],
            8: [[4, 4, 8, 8]]}  # image 6 (palette) has no annotations
    anns = [{"image_id": i, "bbox": b, "category_id": 1 + j % 2}
            for i, boxes in good.items() for j, b in enumerate(boxes)]
    anns += [{"image_id": 8, "bbox": [5, 5, -1, 4]}, {"image_id": 8, "bbox": [40, 1, 4, 4]},
             {"image_id": 8, "bbox": [1, 1, 4, 4], "category_id": 7},
             {"image_id": 99, "bbox": [1, 1, 4, 4]}]
    ann = _coco(tmp_path, list(enumerate(files, start=1)), anns)
    data = json.loads(ann.read_text())
    data["images"].append({"id": 9, "height": H, "width": W})  # no file_name
    ann.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = CocoSource(ann, images)
        parse_drops = {"degenerate_box": 1, "box_outside_image": 1, "unknown_category": 1,
                       "annotation_for_unknown_image": 1, "malformed_image_entry": 1}
        assert source.skips.as_dict() == parse_drops and len(source) == 8

        it = make_train_loader(source, OPS, batch_size=4, max_boxes=3, seed=0, shuffle=False)
        batches = _take(it, 3)  # 12 samples: two passes over the 6 readable images
        for batch in batches:
            assert batch["images"].shape == (4, 16, 16, 3) and batch["mask"].all()
        ids = np.concatenate([b["image_id"] for b in batches]).tolist()
        assert ids == [1, 4, 5, 6, 7, 8] * 2
        assert it.stats == {**parse_drops, "corrupt_image": 4, "too_many_boxes": 2,
                            "num_truncated": 4}

        loader = make_eval_loader(source, OPS, batch_size=3, max_boxes=8)
        eval_batches = list(loader)
    assert len(eval_batches) == len(loader) == 3
    assert sum(int(b["mask"].sum()) for b in eval_batches) == 6
    assert loader.skipped_image_ids == [2, 3]
    assert loader.stats == {**parse_drops, "corrupt_image": 2, "num_truncated": 0}
    for name in ("missing.jpg", "truncated.jpg"):
        assert _logged(caplog, "corrupt_image", str(images / name)) == 2  # train, eval
    assert _logged(caplog, "epoch 0 done", "corrupt_image: 2, too_many_boxes: 1",
                   "2 objects beyond max_boxes=3") == 1
    assert _logged(caplog, "2 of 8 images could not be read", "image ids [2, 3]") == 1
    # skipped images and dropped annotations are out of the metrics: perfect detections
    # on the 6 readable images score 1.0 (the skipped images' boxes are not counted as misses)
    metrics = _perfect_detections(source, eval_batches)
    assert metrics["AP"] == pytest.approx(1.0)


def test_voc_with_a_mix_of_bad_records_trains_and_evaluates(tmp_path, caplog):
    ann_dir, image_dir = _voc(tmp_path, [
        ("a", [("dog", (1, 1, 10, 12))], True),
        ("b", [("cat", (1, 1, 10, 12))], False),                # image file missing
        ("c", [], True),                                        # no objects
        ("d", [("zebra", (1, 1, 5, 5)), ("cat", (9, 1, 3, 5)), ("cat", (2, 2, 9, 9))], True),
    ])
    (ann_dir / "e.xml").write_text("<annotation><filename>")     # malformed XML
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = VocSource(ann_dir, image_dir, class_names=["cat", "dog"])
        parse_drops = {"unknown_category": 1, "degenerate_box": 1, "malformed_xml": 1}
        assert source.skips.as_dict() == parse_drops and len(source) == 4
        it = make_train_loader(source, OPS, batch_size=2, max_boxes=2, seed=0, shuffle=False)
        ids = np.concatenate([b["image_id"] for b in _take(it, 3)]).tolist()
        loader = make_eval_loader(source, OPS, batch_size=2, max_boxes=2)
        eval_batches = list(loader)
    assert ids == [1, 3, 4] * 2
    assert it.stats == {**parse_drops, "corrupt_image": 2, "num_truncated": 0}
    assert np.concatenate([b["mask"] for b in eval_batches]).tolist() == [True, False, True,
                                                                          True]
    assert loader.skipped_image_ids == [2]
    assert _logged(caplog, "malformed_xml", str(ann_dir / "e.xml")) == 1
    assert _logged(caplog, "corrupt_image", str(image_dir / "b.jpg"), "image id 2") == 2
    assert _perfect_detections(source, eval_batches)["AP"] == pytest.approx(1.0)


def test_dataset_with_more_classes_than_the_model_is_refused(tmp_path):
    from jaxdet.config.loader import load_config
    from jaxdet.data import build as data_build

    categories = [*CATEGORIES, {"id": 7, "name": "c"}]
    source = CocoSource(_coco(tmp_path, [(1, "x.jpg")], [], categories), tmp_path / "images")
    config = load_config("shapes_demo", ["model.num_classes=2"])
    with pytest.raises(ValueError, match=r"has 3 classes \(a, b, c\) but model.num_classes is 2"):
        data_build.build_train_loader(config, source)
    with pytest.raises(ValueError, match="set --set model.num_classes=3"):
        data_build.build_eval_loader(config, source)
