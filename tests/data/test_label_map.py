"""TF OD API label maps: reading, names, errors, writing."""

from pathlib import Path

import pytest

from jaxdet.config.label_map import (
    LabelMapError,
    class_names_from_label_map,
    format_label_map,
    parse_label_map_items,
    read_label_map,
    read_label_map_items,
    text_to_id,
    write_label_map,
)

LABEL_MAPS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod" / "label_maps"
needs_shared = pytest.mark.skipif(not LABEL_MAPS.is_dir(), reason="../shared/data not present")


def _write(tmp_path, text):
    path = tmp_path / "map.pbtxt"
    path.write_text(text)
    return path


def test_tiny_label_map_prefers_display_name(tmp_path):
    path = _write(tmp_path, """
        # a comment
        item { id: 2 name: 'dog' }
        item: { name: "/m/01g317" id: 1 display_name: "person" }
        item { id: 5 }
    """)
    assert read_label_map(path) == {2: "dog", 1: "person", 5: "5"}
    items = read_label_map_items(path)
    assert [(i.id, i.name, i.display_name) for i in items] == [
        (2, "dog", None), (1, "/m/01g317", "person"), (5, None, None)]
    assert text_to_id(items) == {"dog": 2, "/m/01g317": 1, "person": 1}
    names = class_names_from_label_map(read_label_map(path), 6)
    assert names == ["person", "dog", "3", "4", "5", "6"]


@pytest.mark.parametrize("text, message", [
    ("item { name: 'x' }", r"line 1: label map item has no id"),
    ("item { id: 1 name: 'a' }\nitem { id: 1 name: 'b' }", r"line 2: duplicate id 1 .*line 1"),
    ("item { id: 0 name: 'background' }", r"id 0 < 1 .*reserved for the background"),
    ("item { id: -3 }", r"id -3 < 1"),
    ("item { id: 'one' }", r"id must be an integer"),
    ("item { id: 1.5 }", r"id must be an integer"),
    ("", r"has no items"),
    ("item { id: 1", r"not a valid label map"),
])
def test_label_map_errors_name_file_and_line(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(LabelMapError, match=message) as info:
        read_label_map(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(LabelMapError, match=r"label map file not found: .*nope\.pbtxt"):
        read_label_map(tmp_path / "nope.pbtxt")


def test_ambiguous_text_is_left_out():
    items = parse_label_map_items("item { id: 1 name: 'a' display_name: 'x' }\n"
                                  "item { id: 2 name: 'b' display_name: 'x' }")
    assert text_to_id(items) == {"a": 1, "b": 2}


def test_write_and_read_back(tmp_path):
    names = ["cat", "it's \\ odd", "dog"]
    path = tmp_path / "out.pbtxt"
    write_label_map(path, names)
    assert read_label_map(path) == {1: "cat", 2: "it's \\ odd", 3: "dog"}
    assert format_label_map({3: "a", 7: "b"}) == (
        "item {\n  id: 3\n  name: 'a'\n}\n\nitem {\n  id: 7\n  name: 'b'\n}\n\n")


@needs_shared
def test_shipped_tf_label_maps():
    pets = read_label_map(LABEL_MAPS / "pet_label_map.pbtxt")
    assert len(pets) == 37 and sorted(pets) == list(range(1, 38))
    assert pets[1] == "Abyssinian" and pets[37] == "yorkshire_terrier"
    coco = read_label_map(LABEL_MAPS / "mscoco_label_map.pbtxt")
    assert len(coco) == 80 and max(coco) == 90  # ids with gaps, display names shown
    assert coco[1] == "person" and coco[90] == "toothbrush"
    coco_text = text_to_id(read_label_map_items(LABEL_MAPS / "mscoco_label_map.pbtxt"))
    assert coco_text["person"] == coco_text["/m/01g317"] == 1
    names = class_names_from_label_map(coco, 90)
    assert names[0] == "person" and names[11] == "12"  # id 12 is unused in COCO
    assert read_label_map(LABEL_MAPS / "pascal_label_map.pbtxt")[20] == "tvmonitor"
    assert read_label_map(LABEL_MAPS / "kitti_label_map.pbtxt") == {1: "car", 2: "pedestrian"}
    # items with nested keypoints messages
    face = read_label_map(LABEL_MAPS / "face_person_with_keypoints_label_map.pbtxt")
    assert face[1] == "face" and len(face) == 2


def test_coco_names_are_the_tf_model_zoo_label_map():
    """jaxdet's built-in COCO names (for 90-class zoo models) equal the TF OD API's
    mscoco_label_map.pbtxt, id for id."""
    from pathlib import Path

    import pytest

    from jaxdet.config.label_map import read_label_map
    from jaxdet.data.coco_names import COCO_CATEGORY_NAMES

    path = Path(__file__).parents[2].parent / "shared/data/tfod/label_maps/mscoco_label_map.pbtxt"
    if not path.is_file():
        pytest.skip("../shared/data is not here")
    by_id = read_label_map(path)  # id -> display_name (else name)
    assert len(by_id) == 80
    for k, name in enumerate(COCO_CATEGORY_NAMES):
        assert name == by_id.get(k + 1, f"id_{k + 1}"), k + 1
