"""Instance masks: COCO polygons / RLE, TFRecord PNG masks, VOC SegmentationObject PNGs and
generated shapes -> records; every augment op and resizer moves masks with image and boxes;
padding to the static [max_boxes, H / s, W / s]; every bad input named and counted."""

import io
import json
import logging
import math
import pickle

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils

from jaxdet.config import schema as S
from jaxdet.data import augment_crop as crop
from jaxdet.data.augment import (
    Normalize,
    RandomColorJitter,
    RandomHorizontalFlip,
    RandomScaleCropAndPadToSquare,
    SSDRandomCrop,
)
from jaxdet.data.augment_color import RandomBlackPatches
from jaxdet.data.coco import CocoSource
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.ground_truth import pad_ground_truth
from jaxdet.data.loader import make_train_loader
from jaxdet.data.masks import (
    coco_rle,
    decode_rles,
    encode_rle,
    load_record_masks,
    resample_masks,
    rle_string_counts,
)
from jaxdet.data.records import make_record
from jaxdet.data.resize import FixedShapeResizer, KeepAspectRatioResizer
from jaxdet.data.shapes import generate_shapes
from jaxdet.data.tfrecord import encode_example, write_tfrecord
from jaxdet.data.tfrecord_source import TfRecordSource, mask_features
from jaxdet.data.voc import VocSource

H, W = 20, 24  # every hand-made image is 24 wide, 20 high


def _logged(caplog, *parts):
    return sum(all(p in r.getMessage() for p in parts) for r in caplog.records)


def _square(x0, y0, x1, y1):
    """A COCO polygon of the pixel-corner rectangle [x0, x1) x [y0, y1)."""
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def _coco(root, annotations, images=((1, "a.jpg"),)):
    (root / "images").mkdir(exist_ok=True)
    entries = []
    for image_id, name in images:
        Image.new("RGB", (W, H), (90, 90, 90)).save(root / "images" / name)
        entries.append({"id": image_id, "file_name": name, "height": H, "width": W})
    for k, ann in enumerate(annotations):
        ann.setdefault("id", k + 1)
        ann.setdefault("image_id", 1)
        ann.setdefault("category_id", 1)
        ann.setdefault("bbox", [1, 1, 10, 10])
    path = root / "ann.json"
    path.write_text(json.dumps({"images": entries, "annotations": annotations,
                                "categories": [{"id": 1, "name": "a"}]}))
    return path


def _runs(mask):
    """Uncompressed COCO RLE run lengths (column-major, starting with zeros)."""
    flat = np.asarray(mask, np.uint8).T.reshape(-1)
    change = np.nonzero(np.diff(flat))[0] + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return runs if flat[0] == 0 else [0] + runs


# --------------------------------------------------------------------------- COCO JSON


def test_polygon_square_decodes_to_its_exact_pixels(tmp_path):
    ann = _coco(tmp_path, [
        {"segmentation": [_square(2, 3, 6, 9)], "bbox": [2, 3, 4, 6]},
        # two polygons of one object are merged (union), as pycocotools merges them
        {"segmentation": [_square(10, 1, 12, 4), _square(15, 10, 20, 12)],
         "bbox": [10, 1, 10, 11]},
    ])
    source = CocoSource(ann, tmp_path / "images", masks=True)
    record = source[0]
    assert "masks" not in record and len(record["mask_ref"]) == 2
    masks = load_record_masks(record)
    assert masks.shape == (2, H, W) and masks.dtype == np.uint8
    expected = np.zeros((2, H, W), np.uint8)
    expected[0, 3:9, 2:6] = 1
    expected[1, 1:4, 10:12] = 1
    expected[1, 10:12, 15:20] = 1
    np.testing.assert_array_equal(masks, expected)
    assert masks[0].sum() == 4 * 6 and masks[1].sum() == 2 * 3 + 5 * 2
    assert source.skips.total == 0
    assert pickle.loads(pickle.dumps(source))[0]["mask_ref"] == record["mask_ref"]
    # without masks asked for, records carry none
    assert "mask_ref" not in CocoSource(ann, tmp_path / "images")[0]


def test_rle_uncompressed_and_compressed_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    mask = (rng.random((H, W)) < 0.3).astype(np.uint8)
    runs = _runs(mask)
    compressed = encode_rle(mask)
    assert rle_string_counts(compressed) == runs  # our reading of pycocotools' string format
    np.testing.assert_array_equal(decode_rles([compressed], H, W)[0], mask)
    ann = _coco(tmp_path, [
        {"segmentation": {"size": [H, W], "counts": runs}},
        {"segmentation": {"size": [H, W], "counts": compressed.decode("ascii")}},
        {"segmentation": coco_rle(mask), "iscrowd": 1},  # a crowd region keeps its mask
    ])
    source = CocoSource(ann, tmp_path / "images", masks=True)
    record = source[0]
    masks = load_record_masks(record)
    for m in masks:
        np.testing.assert_array_equal(m, mask)
    assert record["is_crowd"].tolist() == [False, False, True]
    assert source.skips.total == 0


def test_self_intersecting_polygon_is_filled_as_pycocotools_fills_it(tmp_path):
    star = []  # a five-pointed star drawn in one stroke: its edges cross
    for k in range(5):
        a = -math.pi / 2 + k * 4 * math.pi / 5
        star += [12 + 9 * math.cos(a), 10 + 9 * math.sin(a)]
    ann = _coco(tmp_path, [{"segmentation": [star]}])
    source = CocoSource(ann, tmp_path / "images", masks=True)
    mask = load_record_masks(source[0])[0]
    reference = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects([star], H, W)))
    np.testing.assert_array_equal(mask, reference)
    assert mask[10, 12] == 0 and mask.sum() > 20  # even-odd: the inner pentagon stays empty
    assert source.skips.total == 0  # decoded as COCO's evaluator does; not counted


def test_coco_bad_masks_are_named_counted_and_left_out_of_ground_truth(tmp_path, caplog):
    good = [_square(1, 1, 5, 5)]
    ann = _coco(tmp_path, [
        {"id": 11, "segmentation": good},
        {"id": 12, "segmentation": []},  # empty list
        {"id": 13},  # no segmentation
        {"id": 14, "segmentation": [[]]},  # an empty polygon
        {"id": 15, "segmentation": [[1, 1, 5, 1]]},  # two points
        {"id": 16, "segmentation": [[1, 1, 5, 1], _square(2, 2, 4, 4)]},  # one of two kept
        {"id": 17, "segmentation": {"size": [H + 1, W], "counts": [0, (H + 1) * W]}},
        {"id": 18, "segmentation": {"size": [H, W], "counts": [5, 10]}},  # sums to 15
        {"id": 19, "segmentation": {"size": [H, W], "counts": "\x7f!!"}},  # not RLE digits
        {"id": 20, "segmentation": [["a", 1, 2, 3, 4, 5]]},
        {"id": 21, "segmentation": [[1, 1, 5, 5, 9, 9]]},  # collinear: no pixel
        {"id": 22, "segmentation": {"size": [H, W], "counts": [5, -5, H * W]}},
    ])
    file = str(ann)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = CocoSource(ann, tmp_path / "images", masks=True)
    assert source.skips.as_dict() == {
        "missing_mask": 2, "degenerate_polygon": 3, "mask_size_mismatch": 1,
        "malformed_mask": 4, "empty_mask": 1}
    for ann_id, reason in [(12, "missing_mask"), (13, "missing_mask"),
                           (14, "degenerate_polygon"), (15, "degenerate_polygon"),
                           (16, "degenerate_polygon"), (17, "mask_size_mismatch"),
                           (18, "malformed_mask"), (19, "malformed_mask"),
                           (20, "malformed_mask"), (21, "empty_mask"), (22, "malformed_mask")]:
        assert _logged(caplog, reason, file, f"annotation id {ann_id}") == 1, ann_id
    masks = load_record_masks(source[0])
    assert len(source[0]["boxes"]) == len(masks) == 3  # 11, 16 (repaired), 21 (empty mask)
    assert masks[0].sum() == 16 and masks[1].sum() == 4 and masks[2].sum() == 0
    gt = source.ground_truth()
    assert [a["id"] for a in gt["annotations"]] == [11, 16, 21]
    assert gt["annotations"][1]["segmentation"] == [_square(2, 2, 4, 4)]  # as trained on


def test_coco_file_without_any_segmentation_is_refused(tmp_path):
    ann = _coco(tmp_path, [{"bbox": [1, 1, 4, 4]}])
    with pytest.raises(ValueError, match=r"no annotation has a 'segmentation'.*load_masks"):
        CocoSource(ann, tmp_path / "images", masks=True)
    assert len(CocoSource(ann, tmp_path / "images")[0]["boxes"]) == 1  # fine without masks


# --------------------------------------------------------------------------- TFRecord


def _png(array, mode="L"):
    buf = io.BytesIO()
    Image.fromarray(np.asarray(array, np.uint8), mode).save(buf, "PNG")
    return buf.getvalue()


def _example(masks=None, n=None, height=H, width=W, **extra):
    n = len(masks) if n is None else n
    boxes = np.tile(np.array([[0.1, 0.1, 0.6, 0.6]], np.float32), (n, 1))
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 10)).save(buf, "JPEG")
    f = {"image/encoded": [buf.getvalue()], "image/height": [height], "image/width": [width],
         "image/object/class/label": np.ones(n, np.int64)}
    for j, k in enumerate(("ymin", "xmin", "ymax", "xmax")):
        f[f"image/object/bbox/{k}"] = boxes[:, j]
    if masks is not None:
        f.update(mask_features(masks))
    f.update(extra)
    return encode_example(f)


def _two_masks():
    masks = np.zeros((2, H, W), np.uint8)
    masks[0, 2:12, 3:14] = 1
    masks[1, 5:9, 1:20] = 1
    masks[1, 15:18, 4:6] = 1
    return masks


def test_tfrecord_png_masks_written_and_read_back(tmp_path):
    masks = _two_masks()
    path = tmp_path / "a.tfrecord"
    numerical = {"image/object/mask": masks.astype(np.float32).reshape(-1)}
    write_tfrecord(path, [_example(masks), _example(n=2, **numerical), _example(n=0)])
    source = TfRecordSource(str(path), masks=True)
    assert len(source) == 3 and source.skips.total == 0
    for i in (0, 1):  # PNG masks (kept in the file), numerical masks (kept as RLE)
        np.testing.assert_array_equal(load_record_masks(source[i]), masks)
    assert load_record_masks(source[2]).shape == (0, H, W)
    assert "mask_ref" not in TfRecordSource(str(path))[0]
    gt = source.ground_truth()  # the evaluator's ground truth carries the masks as RLE
    seg = gt["annotations"][1]["segmentation"]
    np.testing.assert_array_equal(mask_utils.decode(seg), masks[1])


def test_tfrecord_bad_masks_are_named_and_counted(tmp_path, caplog):
    masks = _two_masks()
    pngs = [_png(m) for m in masks]
    records = [
        _example(masks),  # byte 0: fine
        _example(n=2, **{"image/object/mask": [pngs[0], _png(np.zeros((H, W + 1)))]}),
        _example(n=2, **{"image/object/mask": [pngs[0], b"not a png"]}),
        _example(n=2),  # objects, no masks: the record goes
        _example(n=2, **{"image/object/mask": [pngs[0]]}),  # one PNG for two objects
    ]
    path = tmp_path / "bad.tfrecord"
    write_tfrecord(path, records)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = TfRecordSource(str(path), masks=True)
    assert source.skips.as_dict() == {"mask_size_mismatch": 1, "malformed_mask": 2,
                                      "missing_mask": 1}
    assert len(source) == 3 and [len(source[i]["boxes"]) for i in range(3)] == [2, 1, 1]
    starts = [0]
    for r in records[:-1]:
        starts.append(starts[-1] + 16 + len(r))
    assert _logged(caplog, "mask_size_mismatch", str(path), f"byte {starts[1]}, object 1",
                   "25x20") == 1
    assert _logged(caplog, "malformed_mask", f"byte {starts[2]}, object 1", "header") == 1
    assert _logged(caplog, "missing_mask", f"byte {starts[3]}", "no image/object/mask") == 1
    assert _logged(caplog, "malformed_mask", f"byte {starts[4]}", "one PNG per object") == 1


def test_a_mask_png_that_cannot_be_decoded_skips_the_image_in_the_loaders(tmp_path, caplog):
    masks = _two_masks()
    broken = _png(masks[1])
    broken = broken[:len(broken) // 2 + 20]  # header intact, pixel data cut short
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, [_example(masks),
                          _example(n=2, **{"image/object/mask": [_png(masks[0]), broken]})])
    source = TfRecordSource(str(path), masks=True)
    assert source.skips.total == 0  # only the header is read when indexing
    ops = [FixedShapeResizer(8, 12, mask_stride=2)]
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        it = make_train_loader(source, ops, batch_size=2, max_boxes=3, seed=0, shuffle=False)
        batch = next(it)
    assert it.skips.as_dict() == {"corrupt_image": 1}
    assert batch["masks"].shape == (2, 3, 4, 6)
    assert _logged(caplog, "corrupt_image", "instance mask cannot be decoded") == 1


# --------------------------------------------------------------------------- Pascal VOC


def _voc(root, stem, objects, labels=None, mode="P"):
    """One VOC image with ``objects`` (name, (xmin, ymin, xmax, ymax)) and, unless ``labels``
    is None, its SegmentationObject PNG."""
    for d in ("Annotations", "JPEGImages", "SegmentationObject"):
        (root / d).mkdir(exist_ok=True)
    Image.new("RGB", (W, H), (20, 90, 120)).save(root / "JPEGImages" / f"{stem}.jpg")
    xml = "".join(
        f"<object><name>{name}</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for name, (x0, y0, x1, y1) in objects)
    (root / "Annotations" / f"{stem}.xml").write_text(
        f"<annotation><filename>{stem}.jpg</filename><size><width>{W}</width>"
        f"<height>{H}</height><depth>3</depth></size>{xml}</annotation>")
    if labels is not None:
        labels = np.asarray(labels, np.uint8)
        image = Image.fromarray(labels, "L")
        if mode == "P":
            image = image.convert("P")
            image.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [224] * 756)
        elif mode == "RGB":
            image = image.convert("RGB")
        image.save(root / "SegmentationObject" / f"{stem}.png")


def test_voc_instance_masks_follow_object_order(tmp_path):
    labels = np.zeros((H, W), np.uint8)
    labels[1:6, 1:8] = 1  # object 0 (an unknown class: dropped, but still id 1)
    labels[8:14, 2:10] = 2
    labels[7, 2:10] = 255  # border: background in the masks
    labels[3:18, 12:22] = 3
    objects = [("unicorn", (2, 2, 8, 6)), ("cat", (3, 9, 10, 14)), ("dog", (13, 4, 22, 18))]
    _voc(tmp_path, "a", objects, labels)
    source = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages", ["cat", "dog"],
                       masks=True)
    record = source[0]
    masks = load_record_masks(record)
    assert record["classes"].tolist() == [0, 1] and masks.shape == (2, H, W)
    np.testing.assert_array_equal(masks[0], labels == 2)
    np.testing.assert_array_equal(masks[1], labels == 3)
    assert source.skips.as_dict() == {"unknown_category": 1}
    assert "mask_ref" not in VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages",
                                       ["cat", "dog"])[0]


def test_voc_bad_masks_drop_the_image_and_are_named(tmp_path, caplog):
    labels = np.zeros((H, W), np.uint8)
    labels[2:5, 2:5] = 1
    one = [("cat", (3, 3, 5, 5))]
    _voc(tmp_path, "good", one + [("cat", (10, 10, 12, 12))], labels)  # object 1: no pixel
    _voc(tmp_path, "nomask", one)
    _voc(tmp_path, "small", one, labels[:-1])
    _voc(tmp_path, "rgb", one, labels, mode="RGB")
    (tmp_path / "SegmentationObject" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnope")
    _voc(tmp_path, "broken", one)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = VocSource(tmp_path / "Annotations", tmp_path / "JPEGImages", ["cat"],
                           masks=True)
    assert len(source) == 1 and source[0]["image_path"].endswith("good.jpg")
    assert source.skips.as_dict() == {"empty_mask": 1, "missing_mask": 1,
                                      "mask_size_mismatch": 1, "malformed_mask": 2}
    xml = tmp_path / "Annotations"
    assert _logged(caplog, "empty_mask", str(xml / "good.xml"), "object 1", "value 2") == 1
    assert _logged(caplog, "missing_mask", str(xml / "nomask.xml")) == 1
    assert _logged(caplog, "mask_size_mismatch", str(xml / "small.xml"), "24x19") == 1
    assert _logged(caplog, "malformed_mask", str(xml / "rgb.xml"), "mode RGB") == 1
    assert _logged(caplog, "malformed_mask", str(xml / "broken.xml")) == 1
    assert load_record_masks(source[0])[1].sum() == 0
    with pytest.raises(FileNotFoundError, match="SegmentationObject"):
        VocSource(xml, tmp_path / "JPEGImages", masks=True, mask_dir=tmp_path / "nope")


# --------------------------------------------------------------------------- augment ops


def _mask_bbox(mask):
    rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    return np.array([rows[0], cols[0], rows[-1] + 1, cols[-1] + 1], np.float32)


def masked_sample(blocks):
    """The conftest block sample (60 x 80, three solid blocks) with each block's mask."""
    rects = ((10, 20, 30, 50), (35, 5, 55, 25), (2, 60, 20, 78))
    sample = blocks.sample(rects=rects)
    masks = np.zeros((3, 60, 80), np.uint8)
    for k, (y0, x0, y1, x1) in enumerate(rects):
        masks[k, y0:y1, x0:x1] = 1
    sample["masks"] = masks
    return sample


def assert_masks_follow(out, blocks, tol=1.0):
    """Masks are binary uint8, one per kept box; each non-empty mask frames its box and its
    block in the image to within ``tol`` mask pixels."""
    masks = out["masks"]
    assert masks.dtype == np.uint8 and set(np.unique(masks)) <= {0, 1}
    assert len(masks) == len(out["boxes"]) == len(out["classes"])
    mh, mw = masks.shape[1:]
    h, w = out["image"].shape[:2]
    to_mask = np.array([mh / h, mw / w, mh / h, mw / w], np.float32)
    for box, cls, mask in zip(out["boxes"], out["classes"], masks, strict=True):
        if not mask.any():
            continue
        found = _mask_bbox(mask)
        np.testing.assert_allclose(found, box * np.array([mh, mw, mh, mw]), atol=tol,
                                   err_msg=f"class {cls}: mask does not frame its box")
        block = blocks.find(out["image"], blocks.COLOURS[cls])
        if block is not None:
            np.testing.assert_allclose(found, block * to_mask, atol=tol + 1,
                                       err_msg=f"class {cls}: mask does not cover its block")


OPS = [
    RandomHorizontalFlip(1.0),
    RandomScaleCropAndPadToSquare(64, scale_min=0.5, scale_max=1.6),
    SSDRandomCrop(random_coef=0.0),
    crop.RandomCropImage(random_coef=0.0, min_area=0.2, max_area=0.6, min_object_covered=0.0),
    crop.RandomSquareCropByScale(max_border=16, scale_min=0.4, scale_max=1.3),
    crop.RandomPadImage(),
    crop.RandomAbsolutePadImage(30, 30),
    RandomBlackPatches(max_black_patches=3, probability=1.0),
    RandomColorJitter(),
    FixedShapeResizer(45, 70),
    FixedShapeResizer(48, 64, mask_stride=4),
    KeepAspectRatioResizer(40, 64, mask_stride=2),
    KeepAspectRatioResizer(30, 50, pad_to_max_dimension=False),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: type(op).__name__)
def test_every_op_moves_masks_with_their_boxes(op, blocks):
    dropped = 0
    for seed in range(8):
        sample = masked_sample(blocks)
        out = op(sample, np.random.default_rng(seed))
        stride = getattr(op, "mask_stride", 1)
        assert_masks_follow(out, blocks, tol=1.0)
        if stride == 1:
            assert out["masks"].shape[1:] == out["image"].shape[:2]
        dropped += 3 - len(out["masks"])
        np.testing.assert_array_equal(sample["masks"], masked_sample(blocks)["masks"])
    if isinstance(op, (SSDRandomCrop, crop.RandomCropImage)):
        assert dropped > 0  # crops drop boxes, and their masks go with them


def test_flip_and_pad_are_exact(blocks):
    sample = masked_sample(blocks)
    flipped = RandomHorizontalFlip(1.0)(sample, np.random.default_rng(0))
    np.testing.assert_array_equal(flipped["masks"], sample["masks"][:, :, ::-1])
    padded = crop.RandomAbsolutePadImage(9, 7)(sample, np.random.default_rng(1))
    h, w = padded["image"].shape[:2]
    oy, ox = (int(v) for v in np.argwhere(padded["masks"][0])[0] - (10, 20))
    assert padded["masks"].sum() == sample["masks"].sum()
    np.testing.assert_array_equal(padded["masks"][:, oy:oy + 60, ox:ox + 80], sample["masks"])
    assert padded["masks"].shape == (3, h, w)


def test_resizer_masks_land_on_the_strided_grid_and_pad_to_max_boxes(blocks):
    sample = masked_sample(blocks)
    out = FixedShapeResizer(120, 160, mask_stride=4)(sample)  # 2x up, then / 4
    assert out["masks"].shape == (3, 30, 40)
    # block 0 spans rows 10..30, cols 20..50 of 60 x 80: rows 5..15, cols 10..25 at stride 4
    np.testing.assert_array_equal(_mask_bbox(out["masks"][0]), [5, 10, 15, 25])
    assert out["masks"][0].sum() == 10 * 15
    keep = KeepAspectRatioResizer(30, 64, mask_stride=4)(sample)  # content 48 x 64 of 64 x 64
    assert keep["masks"].shape == (3, 16, 16)
    assert not keep["masks"][:, 12:].any()  # the padding rows (48 / 4 = 12 onwards)
    padded = pad_ground_truth(Normalize()(out), max_boxes=5)
    assert padded["masks"].shape == (5, 30, 40) and padded["masks"].dtype == np.uint8
    np.testing.assert_array_equal(padded["masks"][:3], out["masks"])
    assert not padded["masks"][3:].any()
    cut = pad_ground_truth(out, max_boxes=2)
    assert cut["masks"].shape == (2, 30, 40) and cut["num_truncated"] == 1
    with pytest.raises(ValueError, match="mask_stride"):
        FixedShapeResizer(8, 8, mask_stride=9)


def test_resample_masks_nearest_at_pixel_centres():
    m = np.zeros((1, 4, 4), np.uint8)
    m[0, 1, 2] = 1
    up = resample_masks(m, (8, 8), (0.5, 0.5), (0.0, 0.0))
    assert np.argwhere(up[0]).tolist() == [[2, 4], [2, 5], [3, 4], [3, 5]]
    mirrored = resample_masks(m, (4, 4), (1.0, -1.0), (0.0, 4.0))
    np.testing.assert_array_equal(mirrored, m[:, :, ::-1])
    shifted = resample_masks(m, (4, 4), (1.0, 1.0), (-1.0, 2.0))  # outside: zeros
    assert np.argwhere(shifted[0]).tolist() == [[2, 0]]


# --------------------------------------------------------------------------- loaders, shapes


def test_loaders_batch_masks_at_the_static_strided_shape(tmp_path):
    ann = _coco(tmp_path, [
        {"image_id": 1, "segmentation": [_square(2, 2, 10, 10)], "bbox": [2, 2, 8, 8]},
        {"image_id": 2, "segmentation": [_square(4, 0, 24, 8)], "bbox": [4, 0, 20, 8]},
        {"image_id": 2, "segmentation": [_square(0, 12, 8, 20)], "bbox": [0, 12, 8, 8],
         "iscrowd": 1},
    ], images=((1, "a.jpg"), (2, "b.jpg"), (3, "c.jpg")))
    source = CocoSource(ann, tmp_path / "images", masks=True)
    ops = [RandomHorizontalFlip(0.5), FixedShapeResizer(40, 48, mask_stride=4), Normalize()]
    batch = next(make_train_loader(source, ops, batch_size=3, max_boxes=4, seed=0,
                                   shuffle=False))
    assert batch["masks"].shape == (3, 4, 10, 12) and batch["masks"].dtype == np.uint8
    assert (batch["masks"].sum(axis=(2, 3)) > 0).tolist() == batch["valid"].tolist()
    eval_batches = list(make_eval_loader(source, ops[1:], batch_size=2, max_boxes=4))
    assert [b["masks"].shape for b in eval_batches] == [(2, 4, 10, 12)] * 2
    second = eval_batches[0]["masks"][1]  # image 2: rows 0..8, cols 4..24 of 20 x 24, / 2 / 4
    np.testing.assert_array_equal(_mask_bbox(second[0]), [0, 2, 4, 12])
    assert not eval_batches[1]["masks"].any()  # image 3 (no objects) and the padding


def test_make_record_checks_mask_shapes():
    boxes = np.array([[0, 0, 2, 2]], np.float32)
    record = make_record("x.jpg", 1, 4, 5, boxes, [0], [False], masks=np.ones((1, 4, 5)))
    assert record["masks"].dtype == np.uint8
    with pytest.raises(ValueError, match=r"expected \[1, 4, 5\]"):
        make_record("x.jpg", 1, 4, 5, boxes, [0], [False], masks=np.ones((1, 5, 4)))


def test_generated_shapes_carry_their_exact_visible_masks(tmp_path):
    plain = generate_shapes(tmp_path / "plain", 3, image_size=(40, 48), seed=4, max_objects=5,
                            image_format="png")
    path = generate_shapes(tmp_path / "masks", 3, image_size=(40, 48), seed=4, max_objects=5,
                           image_format="png", masks=True)
    source = CocoSource(path, path.parent / "images", masks=True)
    without = CocoSource(plain, plain.parent / "images")
    assert source.skips.total == 0
    for i in range(len(source)):
        record = source[i]
        np.testing.assert_array_equal(record["boxes"], without[i]["boxes"])
        masks = load_record_masks(record)
        assert masks.sum(axis=0).max() <= 1  # visible parts: disjoint
        pixels = np.asarray(Image.open(record["image_path"]), np.float32)
        for box, mask in zip(record["boxes"], masks, strict=True):
            assert mask.any()
            y0, x0, y1, x1 = box.astype(int)
            assert mask[y0:y1, x0:x1].sum() == mask.sum()  # inside its (full-shape) box
            colours = pixels[mask > 0]  # one flat colour plus a little pixel noise
            assert np.abs(colours - np.median(colours, axis=0)).max() < 60


def test_config_switches_masks_on(tmp_path):
    from jaxdet.data import build as data_build

    data = S.DataConfig(resizer={"name": "fixed_shape", "height": 64, "width": 96},
                        load_masks=True, mask_stride=8)
    assert data_build.build_resizer(data).mask_stride == 8
    assert S.DataConfig(resizer={"name": "fixed_shape", "height": 8, "width": 8}).mask_stride == 4
    shapes = S.ShapesDataConfig(type="shapes", output_dir=str(tmp_path / "s"), num_images=2,
                                image_size=(32, 32))
    source = data_build.build_source(shapes, masks=True)
    assert load_record_masks(source[0]).shape[1:] == (32, 32)
    assert "mask_ref" not in data_build.build_source(shapes)[0]
