"""Keypoints in the data sources (COCO JSON, TFRecord), label maps and the builders."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jaxdet.config import schema as S
from jaxdet.config.label_map import (
    LabelMapError,
    format_label_map,
    keypoint_spec_from_label_map,
    parse_label_map_items,
    read_label_map_items,
)
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.data import build as data_build
from jaxdet.data.coco import CocoSource
from jaxdet.data.keypoints import COCO_PERSON_KEYPOINTS, KeypointLayout, KeypointSpec
from jaxdet.data.records import coco_ground_truth, make_record
from jaxdet.data.tfrecord import encode_example, write_tfrecord
from jaxdet.data.tfrecord_source import TfRecordSource
from jaxdet.eval.coco_keypoint_eval import CocoKeypointEvaluator
from jaxdet.jobs.convert_dataset import source_to_coco, source_to_tfrecord

LABEL_MAPS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod" / "label_maps"
needs_shared = pytest.mark.skipif(not LABEL_MAPS.is_dir(), reason="../shared/data not present")

PERSON_NAMES = ["nose", "left_eye", "right_eye", "left_hip", "right_hip"]
# the person task picks three of the category's five keypoints, in its own order
PERSON = KeypointSpec("person", ("left_eye", "nose", "right_hip"))
TRIANGLE = KeypointSpec("triangle", ("top", "left", "right"), ((0, 1), (1, 2), (2, 0)))


def _png(path, height, width):
    Image.new("RGB", (width, height), (120, 60, 30)).save(path)


def _ann(ann_id, image_id, category_id, bbox, keypoints=None):
    ann = {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox,
           "area": float(bbox[2] * bbox[3]), "iscrowd": 0}
    if keypoints is not None:
        ann["keypoints"] = keypoints
        ann["num_keypoints"] = sum(1 for v in keypoints[2::3] if v > 0)
    return ann


def _coco(tmp_path):
    """a.png 40x50 (clean objects), b.png 30x30 (every kind of bad keypoint)."""
    _png(tmp_path / "a.png", 40, 50)
    _png(tmp_path / "b.png", 30, 30)
    person = [10, 5, 2, 12, 4, 1, 8, 4, 2, 0, 0, 0, 11, 30, 2]  # [x, y, v] * 5
    annotations = [
        _ann(1, 1, 1, [2, 2, 20, 35], person),
        _ann(2, 1, 2, [30, 5, 10, 10]),  # dog: no keypoints
        _ann(3, 1, 3, [10, 5, 20, 20], [20, 10, 2, 15, 20, 2, 25, 20, 1]),
        # left_eye outside (v=2, x=100), nose unlabelled with coordinates, right_hip v=3;
        # right_eye (not read) outside: not checked
        _ann(4, 2, 1, [1, 1, 20, 20], [5, 5, 0, 100, 4, 2, 99, 4, 2, 0, 0, 0, 6, 20, 3]),
        _ann(5, 2, 1, [2, 2, 20, 20], [1, 1, 2] * 4),  # 4 keypoints for a 5-keypoint category
        _ann(6, 2, 3, [2, 2, 20, 20], [float("nan"), 3, 2, 4, 4, 2, 5, 5, 2]),
        _ann(7, 2, 1, [3, 3, 20, 20], [1, None, 2] * 5),  # not numbers
        _ann(8, 2, 1, [4, 4, 20, 20]),  # a person without keypoints: unlabelled, not counted
    ]
    data = {
        "images": [{"id": 1, "file_name": "a.png", "height": 40, "width": 50},
                   {"id": 2, "file_name": "b.png", "height": 30, "width": 30}],
        "categories": [
            {"id": 1, "name": "person", "keypoints": PERSON_NAMES,
             "skeleton": [[1, 2], [1, 3], [4, 5]]},
            {"id": 2, "name": "dog"},
            {"id": 3, "name": "triangle"},  # no keypoints list: taken as they come
        ],
        "annotations": annotations,
    }
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def coco_file(tmp_path):
    return _coco(tmp_path)


@pytest.fixture
def coco_source(coco_file):
    return CocoSource(coco_file, coco_file.parent, keypoints=(PERSON, TRIANGLE))


# --------------------------------------------------------------------------- COCO JSON


def test_coco_layout_and_clean_keypoints(coco_source):
    layout = coco_source.keypoint_layout
    assert layout.num_keypoints == 6
    person, triangle = layout.groups
    assert (person.class_index, person.offset, person.names) == (0, 0, PERSON.names)
    # the category's 1-based skeleton, kept where both ends are read: nose-left_eye
    assert person.skeleton == ((1, 0),)
    assert (triangle.class_index, triangle.offset, triangle.skeleton) == (2, 3, TRIANGLE.skeleton)
    a = coco_source[0]
    assert a["keypoints"].shape == (3, 6, 2) and a["keypoints"].dtype == np.float32
    assert a["keypoint_visibility"].dtype == np.int32
    np.testing.assert_array_equal(a["classes"], [0, 1, 2])
    # person: (y, x) of left_eye (x 12, y 4, v 1), nose (10, 5, 2), right_hip (11, 30, 2)
    np.testing.assert_array_equal(a["keypoints"][0, :3], [[4, 12], [5, 10], [30, 11]])
    np.testing.assert_array_equal(a["keypoint_visibility"][0], [1, 2, 2, 0, 0, 0])
    np.testing.assert_array_equal(a["keypoints"][1], np.zeros((6, 2)))  # the dog
    np.testing.assert_array_equal(a["keypoint_visibility"][1], np.zeros(6))
    np.testing.assert_array_equal(a["keypoints"][2, 3:], [[10, 20], [20, 15], [20, 25]])
    np.testing.assert_array_equal(a["keypoint_visibility"][2], [0, 0, 0, 2, 2, 1])
    assert not a["keypoints"][2, :3].any()


def test_coco_bad_keypoints_are_counted_and_the_objects_kept(coco_file, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        coco_source = CocoSource(coco_file, coco_file.parent, keypoints=(PERSON, TRIANGLE))
    b = coco_source[1]
    assert len(b["boxes"]) == 5  # every object kept
    np.testing.assert_array_equal(b["classes"], [0, 0, 2, 0, 0])
    v, yx = b["keypoint_visibility"], b["keypoints"]
    # ann 4: left_eye outside -> 0, nose v=0 with coordinates -> zeroed, right_hip v=3 -> 0
    np.testing.assert_array_equal(v[0], np.zeros(6))
    assert not yx[0].any()
    np.testing.assert_array_equal(v[1], np.zeros(6))  # ann 5: count mismatch
    np.testing.assert_array_equal(v[2, 3:], [0, 2, 2])  # ann 6: NaN x of "top"
    np.testing.assert_array_equal(yx[2, 3:], [[0, 0], [4, 4], [5, 5]])
    np.testing.assert_array_equal(v[3], np.zeros(6))  # ann 7: not numbers
    np.testing.assert_array_equal(v[4], np.zeros(6))  # ann 8: no keypoints
    assert coco_source.skips.as_dict() == {
        "keypoint_outside_image": 2, "keypoint_unlabelled_with_coordinates": 1,
        "keypoint_bad_visibility": 1, "keypoint_count_mismatch": 1, "malformed_keypoints": 1,
    }
    text = caplog.text
    for reason, ann_id in (("keypoint_outside_image", 4), ("keypoint_outside_image", 6),
                           ("keypoint_unlabelled_with_coordinates", 4),
                           ("keypoint_bad_visibility", 4), ("keypoint_count_mismatch", 5),
                           ("malformed_keypoints", 7)):
        assert any(reason in line and "ann.json" in line and f"annotation id {ann_id}" in line
                   for line in text.splitlines()), (reason, ann_id)


def test_coco_ground_truth_keeps_keypoints_and_applies_the_repairs(coco_source, coco_file):
    data = json.loads(coco_file.read_text())
    gt = coco_source.ground_truth()
    assert gt["categories"] == data["categories"]  # keypoint names and skeleton kept
    by_id = {a["id"]: a for a in gt["annotations"]}
    assert len(by_id) == 8
    assert by_id[1] == data["annotations"][0]  # clean: as in the file
    # ann 4 repaired in COCO order: nose, left_eye, right_hip unlabelled; right_eye as given
    assert by_id[4]["keypoints"] == [0, 0, 0, 0, 0, 0, 99, 4, 2, 0, 0, 0, 0, 0, 0]
    assert by_id[4]["num_keypoints"] == 1
    assert by_id[5]["keypoints"] == [0] * 15 and by_id[5]["num_keypoints"] == 0
    assert by_id[6]["keypoints"] == [0, 0, 0, 4, 4, 2, 5, 5, 2]
    assert by_id[7]["keypoints"] == [0] * 15
    assert "keypoints" not in by_id[8]
    # pycocotools takes it: the person task's keypoints, picked by name
    evaluator = CocoKeypointEvaluator(gt, 1, (0.05, 0.05, 0.05), list(PERSON.names))
    assert evaluator.evaluate()["AP"] == 0.0


def test_coco_without_keypoint_specs_has_no_keypoints(coco_file):
    source = CocoSource(coco_file, coco_file.parent)
    assert not source.keypoint_layout and source.keypoint_layout.num_keypoints == 0
    assert "keypoints" not in source[0] and "keypoint_visibility" not in source[0]
    assert source.skips.total == 0


def test_coco_missing_class_or_keypoint_names_are_clear_errors(coco_file):
    with pytest.raises(ValueError, match=r"ann\.json: the keypoint task's class 'cat' is not a "
                                         r"class of the dataset"):
        CocoSource(coco_file, coco_file.parent, keypoints=(KeypointSpec("cat", ("ear",)),))
    with pytest.raises(ValueError, match=r"ann\.json: category 1 \('person'\) has no keypoints "
                                         r"named \['elbow'\] \(its keypoints: \['nose'"):
        CocoSource(coco_file, coco_file.parent,
                   keypoints=(KeypointSpec("person", ("nose", "elbow")),))


def test_coco_category_without_names_takes_positions_when_the_count_matches(coco_file):
    # the triangle category has no keypoints list; a 2-name spec makes 9 values a mismatch
    source = CocoSource(coco_file, coco_file.parent,
                        keypoints=(KeypointSpec("triangle", ("top", "left")),))
    assert source.skips.as_dict() == {"keypoint_count_mismatch": 2}
    assert not source[0]["keypoint_visibility"].any()


# --------------------------------------------------------------------------- records -> COCO


def test_coco_ground_truth_of_records_writes_the_groups_keypoints():
    layout = KeypointLayout.from_groups([(1, "person", ("a", "b"), ((0, 1),)),
                                         (2, "tri", ("x",))])
    record = make_record(
        "im.png", 5, 20, 30, boxes=[[1, 1, 10, 10], [2, 2, 8, 8], [0, 0, 5, 5]],
        classes=[1, 2, 0], keypoints=[[[3, 4], [0, 0], [0, 0]], [[0, 0], [0, 0], [6, 7]],
                                      [[0, 0]] * 3],
        keypoint_visibility=[[2, 0, 0], [0, 0, 1], [0, 0, 0]])
    gt = coco_ground_truth([record], ["dog", "person", "tri"], "test", layout=layout)
    first, second, third = gt["annotations"]
    assert first["keypoints"] == [4.0, 3.0, 2, 0, 0, 0] and first["num_keypoints"] == 1
    assert second["keypoints"] == [7.0, 6.0, 1] and second["num_keypoints"] == 1
    assert "keypoints" not in third  # the dog's class has no group
    assert gt["categories"] == [
        {"id": 1, "name": "dog"},
        {"id": 2, "name": "person", "keypoints": ["a", "b"], "skeleton": [[1, 2]]},
        {"id": 3, "name": "tri", "keypoints": ["x"], "skeleton": []}]
    plain = coco_ground_truth([record], ["dog", "person", "tri"], "test")
    assert all("keypoints" not in a for a in plain["annotations"])


# --------------------------------------------------------------------------- TFRecord


def test_tfrecord_round_trip(coco_source, tmp_path):
    out, label_map = tmp_path / "out.record", tmp_path / "label_map.pbtxt"
    summary = source_to_tfrecord(coco_source, out, label_map_out=label_map, progress=False)
    assert summary.num_images == 2
    # the label map carries each group's keypoints, ids = slots (TF's keypoint indices)
    items = read_label_map_items(label_map)
    assert items[0].keypoints == ((0, "left_eye"), (1, "nose"), (2, "right_hip"))
    assert items[2].keypoints == ((3, "top"), (4, "left"), (5, "right"))
    assert keypoint_spec_from_label_map(label_map, "person").names == PERSON.names
    back = TfRecordSource(out, label_map, keypoints=(PERSON, TRIANGLE))
    assert back.skips.total == 0
    assert [(g.class_index, g.offset, g.names) for g in back.keypoint_layout.groups] == [
        (g.class_index, g.offset, g.names) for g in coco_source.keypoint_layout.groups]
    for i in range(2):
        a, b = coco_source[i], back[i]
        np.testing.assert_allclose(b["boxes"], a["boxes"], atol=1e-4)
        np.testing.assert_array_equal(b["classes"], a["classes"])
        np.testing.assert_allclose(b["keypoints"], a["keypoints"], atol=1e-4)
        np.testing.assert_array_equal(b["keypoint_visibility"], a["keypoint_visibility"])
        assert b["keypoints"].dtype == np.float32
    gt = back.ground_truth()
    assert gt["categories"][0]["keypoints"] == list(PERSON.names)
    assert gt["annotations"][0]["keypoints"] == pytest.approx([12, 4, 1, 10, 5, 2, 11, 30, 2])


def test_coco_output_keeps_keypoints(coco_source, tmp_path):
    source_to_coco(coco_source, tmp_path / "coco", progress=False)
    again = CocoSource(tmp_path / "coco" / "annotations.json", tmp_path / "coco" / "images",
                       keypoints=(PERSON, TRIANGLE))
    assert again.skips.total == 0
    for i in range(2):
        np.testing.assert_allclose(again[i]["keypoints"], coco_source[i]["keypoints"])
        np.testing.assert_array_equal(again[i]["keypoint_visibility"],
                                      coco_source[i]["keypoint_visibility"])


PERSON_MAP = """item { name: "/m/01g317" id: 1 display_name: "person"
  keypoints { id: 0 label: "nose" } keypoints { id: 1 label: "left_eye" }
  keypoints { id: 2 label: "right_eye" } }
item { name: "/m/0bt9lr" id: 2 display_name: "dog" }
"""


def _example(height=20, width=40, labels=(1,), keypoints=None):
    """A PNG Example with one 10x10 box per label; ``keypoints``: extra features."""
    import io

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 10)).save(buf, "PNG")
    n = len(labels)
    features = {
        "image/encoded": [buf.getvalue()], "image/format": ["png"],
        "image/height": np.array([height], np.int64), "image/width": np.array([width], np.int64),
        "image/object/bbox/ymin": np.full(n, 0.1, np.float32),
        "image/object/bbox/xmin": np.full(n, 0.1, np.float32),
        "image/object/bbox/ymax": np.full(n, 0.6, np.float32),
        "image/object/bbox/xmax": np.full(n, 0.4, np.float32),
        "image/object/class/label": np.asarray(labels, np.int64),
    }
    features.update(keypoints or {})
    return encode_example(features)


def _kp(y, x, v=None):
    out = {"image/object/keypoint/y": np.asarray(y, np.float32),
           "image/object/keypoint/x": np.asarray(x, np.float32)}
    if v is not None:
        out["image/object/keypoint/visibility"] = np.asarray(v, np.int64)
    return out


@pytest.mark.parametrize("class_name", ["/m/01g317", "person"])
def test_tfrecord_keypoints_tf_defaults_and_bad_counts(tmp_path, class_name, caplog):
    (tmp_path / "map.pbtxt").write_text(PERSON_MAP)
    nan = float("nan")
    examples = [
        # person + dog; no visibility: v=2 unless x is NaN (TF's default); the dog's slots
        # are left unlabelled whatever the file says
        _example(labels=(1, 2), keypoints=_kp([0.5, nan, 0.25, 0.1, 0.1, 0.1],
                                              [0.5, nan, 0.75, 0.2, 0.2, 0.2])),
        _example(labels=(1,), keypoints=_kp([0.5, 0.5], [0.5, 0.5])),  # 2 values for 1 x 3
        _example(labels=(1,), keypoints=_kp([0.5] * 3, [0.5] * 3, [2, 2])),  # visibility: 2
        # y = 2 x height: outside; v = 0 with coordinates: zeroed
        _example(labels=(1,), keypoints=_kp([0.5, 2.0, 0.5], [0.5, 0.5, 0.5], [2, 2, 0])),
        _example(labels=(1,)),  # no keypoint features at all
        _example(labels=()),  # no objects, no keypoints: fine
    ]
    write_tfrecord(tmp_path / "kp.record", examples)
    spec = KeypointSpec(class_name, ("nose", "left_eye", "right_eye"))
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        source = TfRecordSource(tmp_path / "kp.record", tmp_path / "map.pbtxt", keypoints=(spec,))
    assert source.keypoint_layout.groups[0].class_name == "person"
    assert len(source) == 6
    first = source[0]
    np.testing.assert_allclose(first["keypoints"][0], [[10, 20], [0, 0], [5, 30]])
    np.testing.assert_array_equal(first["keypoint_visibility"], [[2, 0, 2], [0, 0, 0]])
    assert not first["keypoints"][1].any()
    for i in (1, 2, 4):
        assert len(source[i]["boxes"]) == 1 and not source[i]["keypoint_visibility"].any()
    np.testing.assert_array_equal(source[3]["keypoint_visibility"], [[2, 0, 0]])
    np.testing.assert_allclose(source[3]["keypoints"], [[[10, 20], [0, 0], [0, 0]]])
    assert source[5]["keypoints"].shape == (0, 3, 2)
    assert source.skips.as_dict() == {"keypoint_count_mismatch": 3, "keypoint_outside_image": 1,
                                      "keypoint_unlabelled_with_coordinates": 1}
    assert "kp.record [byte " in caplog.text and "object 0" in caplog.text
    gt = source.ground_truth()
    assert gt["annotations"][0]["keypoints"] == [20.0, 10.0, 2, 0, 0, 0, 30.0, 5.0, 2]


def test_tfrecord_unknown_keypoint_class_names_the_label_map(tmp_path):
    (tmp_path / "map.pbtxt").write_text(PERSON_MAP)
    write_tfrecord(tmp_path / "kp.record", [_example()])
    with pytest.raises(ValueError, match=r"kp\.record .*map\.pbtxt: the keypoint task's class "
                                         r"'cat' is not a class"):
        TfRecordSource(tmp_path / "kp.record", tmp_path / "map.pbtxt",
                       keypoints=(KeypointSpec("cat", ("ear",)),))


# --------------------------------------------------------------------------- label maps

ZOO_LABEL_MAP = "item {\n  name: \"/m/01g317\"\n  id: 1\n  display_name: \"person\"\n" + "".join(
    f"  keypoints {{\n    id: {i}\n    label: \"{n}\"\n  }}\n"
    for i, n in enumerate(COCO_PERSON_KEYPOINTS)) + "}\n"


def test_zoo_label_map_keypoints(tmp_path):
    """The zoo's CenterNet kpts label_map.txt: person with 17 keypoints {id label}."""
    path = tmp_path / "label_map.txt"
    path.write_text(ZOO_LABEL_MAP)
    (item,) = read_label_map_items(path)
    assert item.keypoints == tuple(enumerate(COCO_PERSON_KEYPOINTS))
    for name in ("/m/01g317", "person"):
        spec = keypoint_spec_from_label_map(path, name)
        assert spec == KeypointSpec("person", COCO_PERSON_KEYPOINTS)


def test_keypoint_names_are_ordered_by_id_and_round_trip():
    text = format_label_map({1: "a", 2: "b"}, {2: [(5, "z"), (3, "y")]})
    items = parse_label_map_items(text)
    assert items[0].keypoints == () and items[1].keypoints == ((5, "z"), (3, "y"))


@pytest.mark.parametrize("text, message", [
    ("item { id: 1 name: 'a' keypoints { id: 0 label: 'x' } keypoints { id: 0 label: 'y' } }",
     r"duplicate keypoint id 0"),
    ("item { id: 1 name: 'a' keypoints { id: 0 label: 'x' } keypoints { id: 1 label: 'x' } }",
     r"duplicate keypoint label 'x'"),
    ("item { id: 1 name: 'a' keypoints { id: -1 label: 'x' } }", r"keypoint id must be"),
    ("item { id: 1 name: 'a' keypoints { id: 0 } }", r"keypoint 0 has no label"),
])
def test_bad_keypoint_entries(text, message):
    with pytest.raises(LabelMapError, match=message):
        parse_label_map_items(text, "m.pbtxt")


def test_keypoint_spec_errors_name_the_path_and_class(tmp_path):
    path = tmp_path / "map.pbtxt"
    path.write_text(PERSON_MAP)
    with pytest.raises(LabelMapError, match=r"label map file not found: .*nope\.pbtxt "
                                            r"\(looking for the keypoints of class 'person'\)"):
        keypoint_spec_from_label_map(tmp_path / "nope.pbtxt", "person")
    with pytest.raises(LabelMapError, match=r"map\.pbtxt: item 2 \('dog'\) defines no keypoints "
                                            r"\(looking for the keypoints of class 'dog'\)"):
        keypoint_spec_from_label_map(path, "dog")
    with pytest.raises(LabelMapError, match=r"map\.pbtxt: no item named 'cat' .*class 'cat'.*"
                                            r"items with keypoints: \['/m/01g317'\]"):
        keypoint_spec_from_label_map(path, "cat")


@needs_shared
def test_shipped_label_maps_with_and_without_keypoints():
    face = LABEL_MAPS / "face_person_with_keypoints_label_map.pbtxt"
    spec = keypoint_spec_from_label_map(face, "Person")  # ids 6..22
    assert spec.class_name == "PERSON" and len(spec.names) == 17
    assert spec.names[0] == "NOSE_TIP" and spec.names[-1] == "RIGHT_ANKLE"
    assert keypoint_spec_from_label_map(face, "face").names[0] == "left_eye_center"
    with pytest.raises(LabelMapError, match=r"defines no keypoints"):
        keypoint_spec_from_label_map(LABEL_MAPS / "mscoco_label_map.pbtxt", "/m/01g317")


# --------------------------------------------------------------------------- builders


def test_keypoint_specs_of_configs():
    assert data_build.keypoint_specs(load_config("shapes_demo")) == ()  # an SSD
    assert data_build.keypoint_specs(load_config("centernet_shapes_demo")) == ()
    specs = data_build.keypoint_specs(load_config("centernet_keypoints_shapes_demo"))
    assert [s.class_name for s in specs] == ["square", "triangle"]
    assert specs[1].names == ("top", "next", "last")
    assert specs[1].skeleton == ((0, 1), (1, 2), (2, 0))


def test_build_source_passes_keypoints(coco_file, tmp_path):
    cfg = S.CocoDataConfig(type="coco", annotation_file=str(coco_file),
                           image_dir=str(coco_file.parent))
    source = data_build.build_source(cfg, keypoints=(PERSON,))
    assert source.keypoint_layout.num_keypoints == 3
    voc = S.VocDataConfig(type="voc", annotation_dir=str(tmp_path), image_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"data.train: Pascal VOC annotations have no "
                                          r"keypoints.*classes person"):
        data_build.build_source(voc, keypoints=(PERSON,), field="data.train")


def test_generated_shapes_carry_the_model_keypoints(tmp_path):
    config = load_config("centernet_keypoints_shapes_demo", ["data.train.num_images=4"])
    source = data_build.build_source(config.data.train, tmp_path,
                                   keypoints=data_build.keypoint_specs(config))
    assert [g.class_name for g in source.keypoint_layout.groups] == ["square", "triangle"]
    assert source.skips.total == 0
    for i in range(len(source)):
        r = source[i]
        labelled = r["keypoint_visibility"] > 0
        # squares fill slots 0-3, triangles 4-6, circles none
        np.testing.assert_array_equal(labelled[:, :4].all(1), r["classes"] == 1)
        np.testing.assert_array_equal(labelled[:, 4:].all(1), r["classes"] == 2)
        assert labelled.sum() == 4 * (r["classes"] == 1).sum() + 3 * (r["classes"] == 2).sum()
