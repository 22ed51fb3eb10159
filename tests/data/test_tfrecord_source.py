"""TfRecordSource: TF OD API Examples -> jaxdet records; images read lazily by byte range."""

import io
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.config.label_map import read_label_map
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.data import build as data_build
from jaxdet.data.decode import CorruptImageError, load_image_bytes, load_record_image
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.resize import FixedShapeResizer
from jaxdet.data.tfrecord import encode_example, iter_tfrecord, parse_example, write_tfrecord
from jaxdet.data.tfrecord_source import TfRecordSource, pixel_box, resolve_input_paths
from jaxdet.eval.visualize import draw_detections

TFOD = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod"
PETS = TFOD / "pets_examples.record"
PET_MAP = TFOD / "label_maps" / "pet_label_map.pbtxt"
needs_pets = pytest.mark.skipif(not PETS.is_file(), reason="../shared/data not present")


def _jpeg(height, width, colour=(200, 30, 30), fmt="JPEG"):
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, fmt)
    return buf.getvalue()


def _example(height=40, width=60, boxes=(), labels=None, texts=None, source_id="", size=True,
             **extra):
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    f = {"image/encoded": [_jpeg(height, width)], "image/format": ["jpeg"],
         "image/source_id": [source_id], "image/filename": [f"img{source_id}.jpg"]}
    if size:
        f.update({"image/height": [height], "image/width": [width]})
    for j, k in enumerate(("ymin", "xmin", "ymax", "xmax")):
        f[f"image/object/bbox/{k}"] = boxes[:, j]
    if labels is not None:
        f["image/object/class/label"] = np.asarray(labels, np.int64)
    if texts is not None:
        f["image/object/class/text"] = list(texts)
    f.update(extra)
    return encode_example(f)


@pytest.fixture
def label_map(tmp_path):
    path = tmp_path / "map.pbtxt"
    path.write_text("item { id: 1 name: 'cat' }\nitem { id: 2 name: 'dog' display_name: 'Dog' }"
                    "\nitem { id: 3 name: 'bird' }\n")
    return path


def test_records_boxes_classes_and_lazy_images(tmp_path, label_map):
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, [
        _example(boxes=[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]], labels=[1, 3],
                 source_id="17", **{"image/object/difficult": np.array([0, 1])}),
        _example(50, 30, boxes=[[0.5, 0.5, 0.75, 1.0]], labels=[2], source_id="abc"),
        _example(boxes=[], labels=[], source_id="5"),
    ])
    source = TfRecordSource(str(path), label_map)
    assert len(source) == 3 and source.num_classes == 3 and source.skips.total == 0
    assert source.category_ids == [1, 2, 3]
    assert source.category_names == ["cat", "Dog", "bird"]
    r = source[0]
    np.testing.assert_allclose(r["boxes"], [[4, 12, 20, 36], [0, 0, 40, 60]], atol=1e-4)
    assert r["classes"].tolist() == [0, 2] and r["is_crowd"].tolist() == [False, True]
    assert (r["image_id"], r["height"], r["width"]) == (17, 40, 60)
    assert r["image_path"] == f"{path}@0" and r["file_name"] == "img17.jpg"
    image = load_record_image(r)
    assert image.shape == (40, 60, 3) and abs(int(image[0, 0, 0]) - 200) < 8
    r1 = source[1]
    np.testing.assert_allclose(r1["boxes"], [[25, 15, 37.5, 30]], atol=1e-4)
    assert r1["image_id"] == 18  # not an integer: a running id above the largest (17)
    assert source[2]["image_id"] == 5 and source[2]["boxes"].shape == (0, 4)
    assert source.image_ids == [17, 18, 5]
    # the byte range is exactly the encoded image inside the record
    file, start, length = r["image_bytes_ref"]
    raw = Path(file).read_bytes()[start:start + length]
    assert raw == parse_example(next(iter_tfrecord(path))[1])["image/encoded"][0]
    gt = source.ground_truth()
    assert [im["id"] for im in gt["images"]] == [17, 18, 5]
    assert gt["annotations"][0]["bbox"] == pytest.approx([12, 4, 24, 16], abs=1e-4)
    assert [a["iscrowd"] for a in gt["annotations"]] == [0, 1, 0]
    assert gt["categories"] == [{"id": 1, "name": "cat"}, {"id": 2, "name": "Dog"},
                                {"id": 3, "name": "bird"}]


def test_bad_objects_and_examples_are_counted_and_named(tmp_path, label_map, caplog):
    path = tmp_path / "b.tfrecord"
    write_tfrecord(path, [
        _example(boxes=[[0.1, 0.1, 0.5, 0.5]] * 4, labels=[0, 4, 1, 2], source_id="1"),
        _example(boxes=[[0.5, 0.5, 0.4, 0.9], [1.2, 0.0, 1.5, 0.5], [-0.5, 0.5, 0.5, 1.2],
                        [np.nan, 0, 1, 1]], labels=[1, 1, 1, 1], source_id="2"),
        _example(boxes=[[0.1, 0.1, 0.5, 0.5]], labels=[1, 2], source_id="3"),  # 1 box, 2 labels
        b"\x0a\x05\x0a",  # not an Example
        encode_example({"image/height": [3]}),  # no image
        _example(boxes=[[0.1, 0.1, 0.2, 0.2]], labels=[1], source_id="1"),  # duplicate id
    ])
    with caplog.at_level(logging.WARNING, "jaxdet.data"):
        source = TfRecordSource(path, label_map)
    assert source.skips.as_dict() == {
        "unknown_category": 2, "degenerate_box": 2, "box_outside_image": 1, "box_clipped": 1,
        "malformed_example": 2, "example_without_image": 1, "duplicate_source_id": 1,
    }
    assert len(source) == 3
    assert source[0]["classes"].tolist() == [0, 1]
    np.testing.assert_allclose(source[1]["boxes"], [[0, 30, 20, 60]], atol=1e-4)  # clipped
    assert source[2]["image_id"] == 3  # duplicate "1" got a new id
    offsets = [o for o, _ in iter_tfrecord(path)]
    assert f"{path} [byte {offsets[0]}, object 0]: label 0 outside 1..3" in caplog.text
    assert f"[byte {offsets[2]}]: per-object lists differ" in caplog.text
    assert "dropped or repaired" in caplog.text


def test_text_labels_through_the_label_map(tmp_path, label_map):
    path = tmp_path / "t.tfrecord"
    write_tfrecord(path, [_example(boxes=[[0.1, 0.1, 0.5, 0.5]] * 3,
                                   texts=["Dog", "cat", "zebra"])])
    source = TfRecordSource(path, label_map)
    assert source[0]["classes"].tolist() == [1, 0]
    assert source.skips.as_dict() == {"unknown_category": 1}
    without_map = TfRecordSource(path)  # text but no label map: the Example is dropped
    assert len(without_map) == 0 and without_map.skips.as_dict() == {"malformed_example": 1}


def test_num_classes_bounds_and_fallbacks(tmp_path):
    path = tmp_path / "n.tfrecord"
    write_tfrecord(path, [_example(boxes=[[0.1, 0.1, 0.5, 0.5]] * 2, labels=[2, 5])])
    source = TfRecordSource(path)  # no label map: the largest label found
    assert source.num_classes == 5 and source.category_names == ["1", "2", "3", "4", "5"]
    source = TfRecordSource(path, num_classes=3)
    assert source.num_classes == 3 and source[0]["classes"].tolist() == [1]
    assert source.skips.as_dict() == {"unknown_category": 1}


def test_size_from_image_when_missing(tmp_path):
    path = tmp_path / "s.tfrecord"
    write_tfrecord(path, [_example(30, 20, boxes=[[0, 0, 0.5, 0.5]], labels=[1], size=False)])
    r = TfRecordSource(path)[0]
    assert (r["height"], r["width"]) == (30, 20)
    np.testing.assert_allclose(r["boxes"], [[0, 0, 15, 10]])


def test_pixel_box_rules_match_coco():
    assert pixel_box([1, 2, 3, 4], 10, 10) == ((1, 2, 3, 4), None)
    assert pixel_box([-0.5, 0, 3, 10.5], 10, 10) == ((0, 0, 3, 10), None)  # within tolerance
    assert pixel_box([-3, 0, 3, 4], 10, 10) == ((0, 0, 3, 4), "box_clipped")
    assert pixel_box([3, 0, 3, 4], 10, 10) == (None, "degenerate_box")
    assert pixel_box([11, 0, 12, 4], 10, 10) == (None, "box_outside_image")


def test_sharded_glob_sorted_and_errors(tmp_path):
    for i in (2, 0, 1):
        write_tfrecord(tmp_path / f"train-{i:05d}-of-00003.tfrecord",
                       [_example(boxes=[[0, 0, 1, 1]], labels=[1], source_id=str(10 + i))])
    source = TfRecordSource(str(tmp_path / "train-?????-of-00003.tfrecord"))
    assert [Path(f).name[:11] for f in source.files] == ["train-00000", "train-00001",
                                                         "train-00002"]
    assert source.image_ids == [10, 11, 12]
    with pytest.raises(FileNotFoundError, match=r"no TFRecord file matches .*val-\*"):
        resolve_input_paths([str(tmp_path / "val-*")])
    with pytest.raises(FileNotFoundError, match="TFRecord file not found: .*missing.record"):
        TfRecordSource([str(tmp_path / "train-00000-of-00003.tfrecord"),
                        str(tmp_path / "missing.record")])


def test_config_and_builder(tmp_path, label_map):
    path = tmp_path / "c.tfrecord"
    write_tfrecord(path, [_example(boxes=[[0, 0, 1, 1]], labels=[3])])
    config = load_config("shapes_demo", [
        f"data.train={{type: tfrecord, input_path: '{path}', label_map_path: '{label_map}'}}",
        "data.eval={type: tfrecord, input_path: [PATH_TO_BE_CONFIGURED/val.record]}"])
    assert config.data.train.input_path == (str(path),)
    source = data_build.build_source(config.data.train, num_classes=3, field="data.train")
    assert isinstance(source, TfRecordSource) and source.category_names[2] == "bird"
    with pytest.raises(ConfigError, match=(
            r"data\.eval\.input_path .*PATH_TO_BE_CONFIGURED/val\.record.*"
            r"eval_input_reader\.tf_record_input_reader\.input_path.*--set data\.eval\.input_pat")):
        data_build.build_source(config.data.eval, field="data.eval")
    bad_map = load_config("shapes_demo", [
        f"data.train={{type: tfrecord, input_path: '{path}', "
        "label_map_path: PATH_TO_BE_CONFIGURED/map.pbtxt}"])
    with pytest.raises(ConfigError, match=r"data\.train\.label_map_path.*train_input_reader\."
                                          r"label_map_path"):
        data_build.build_source(bad_map.data.train, field="data.train")


def test_load_image_bytes_shares_decode_errors():
    assert load_image_bytes(_jpeg(5, 7, fmt="PNG"), "x").shape == (5, 7, 3)
    with pytest.raises(CorruptImageError, match=r"(?i)cannot read image rec@12: .*truncated"):
        load_image_bytes(_jpeg(64, 64)[:300], "rec@12")
    with pytest.raises(CorruptImageError, match="rec@3"):
        load_image_bytes(b"not an image", "rec@3")


def test_truncated_file_after_build_is_a_corrupt_image(tmp_path):
    path = tmp_path / "cut.tfrecord"
    write_tfrecord(path, [_example(boxes=[], labels=[])])
    source = TfRecordSource(path)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CorruptImageError, match=r"cut\.tfrecord@0"):
        load_record_image(source[0])


# --------------------------------------------------------------------------- the pets records


@pytest.fixture(scope="module")
def pets():
    if not PETS.is_file():
        pytest.skip("../shared/data not present")
    return TfRecordSource(PETS, PET_MAP)


@needs_pets
def test_pets_decode_and_classes_match_text(pets):
    names = read_label_map(PET_MAP)
    assert len(pets) == 10 and pets.num_classes == 37 and pets.skips.total == 0
    raw = [parse_example(d) for _, d in iter_tfrecord(PETS)]
    for i, ex in enumerate(raw):
        r = pets[i]
        h, w = int(ex["image/height"][0]), int(ex["image/width"][0])
        assert (r["height"], r["width"]) == (h, w)
        image = load_record_image(r)
        assert image.shape == (h, w, 3)
        norm = np.stack([ex[f"image/object/bbox/{k}"] for k in ("ymin", "xmin", "ymax", "xmax")],
                        axis=1)
        np.testing.assert_allclose(r["boxes"], norm * [h, w, h, w], atol=1e-3)
        assert (r["boxes"] >= 0).all() and (r["boxes"][:, 2:] <= [h, w]).all()
        texts = [t.decode() for t in ex["image/object/class/text"]]
        assert [pets.category_names[c] for c in r["classes"]] == texts
        assert [names[c + 1] for c in r["classes"]] == texts
        assert r["file_name"] == ex["image/filename"][0].decode()


@needs_pets
def test_pets_drawn_boxes_are_where_the_record_says(pets):
    for i in (0, 5):
        r = pets[i]
        blank = np.zeros((r["height"], r["width"], 3), np.uint8)
        drawn = np.asarray(draw_detections(blank, r["boxes"], r["classes"], None,
                                           pets.category_names))
        ex = parse_example(dict(iter_tfrecord(PETS))[int(r["image_path"].rsplit("@", 1)[1])])
        y0, x0, y1, x1 = (float(ex[f"image/object/bbox/{k}"][0]) for k in
                          ("ymin", "xmin", "ymax", "xmax"))
        h, w = r["height"], r["width"]
        # the box outline's left/right columns and bottom row lie on the record's box edges
        # (the label tag covers the top edge)
        mask = drawn.any(axis=2)
        cols = np.nonzero(mask[int(y1 * h) - 2])[0]
        assert abs(cols.min() - x0 * w) <= 1.5 and abs(cols.max() + 1 - x1 * w) <= 1.5
        rows = np.nonzero(mask[:, int((x0 + x1) / 2 * w)])[0]
        assert abs(rows.max() + 1 - y1 * h) <= 1.5


@needs_pets
@pytest.mark.slow
def test_pets_eval_loader_with_a_worker_process(pets):
    assert len(pickle.dumps(pets)) < 20_000  # annotations and byte ranges only
    loader = make_eval_loader(pets, [FixedShapeResizer(32, 32)], batch_size=4, max_boxes=4,
                              worker_count=1)
    batches = list(loader)
    assert len(batches) == 3 and loader.skips.total == 0
    ids = np.concatenate([b["image_id"][b["mask"]] for b in batches])
    assert ids.tolist() == pets.image_ids
    first = batches[0]
    np.testing.assert_allclose(first["boxes"][0, 0],
                               pets[0]["boxes"][0] / [225, 300, 225, 300], atol=1e-5)
