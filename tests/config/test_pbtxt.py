"""The protobuf text-format reader: syntax, values, errors, and the read-tracking that lets the
pipeline.config mapper refuse to drop a field silently."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jaxdet.config.pbtxt import EnumValue, Message, PbtxtError, parse_pbtxt

SHARED = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod"

TEXT = """
# a comment line
model {
  ssd {
    num_classes: 90   # trailing comment
    aspect_ratios: [1.0, 2.0, .5]
    aspect_ratios: 3
    activation: RELU_6,
    name: 'it''s' "a \\"b\\"\\n"
    flag: true; other: False
    small: 1e-8
    neg: -4.6
    hex: 0x1F
    f_suffix: 1.5f
    big: -inf
    inner: { a: 1 }
    angle < b: 2 >
    list_of_msgs [{ x: 1 }, { x: 2 }]
  }
}
empty {}
"""


def test_values_and_nesting():
    root = parse_pbtxt(TEXT)
    ssd = root.take("model").take("ssd")
    assert ssd.path == "model.ssd"
    assert ssd.take("num_classes") == 90 and isinstance(ssd.take("num_classes"), int)
    assert ssd.all("aspect_ratios") == [1.0, 2.0, 0.5, 3]
    act = ssd.take("activation")
    assert act == "RELU_6" and isinstance(act, EnumValue)
    assert ssd.take("name") == 'its' + 'a "b"\n'  # adjacent literals concatenate
    assert ssd.take("flag") is True and ssd.take("other") is False
    assert ssd.take("small") == 1e-8 and ssd.take("neg") == -4.6
    assert ssd.take("hex") == 31 and ssd.take("f_suffix") == 1.5
    assert ssd.take("big") == -math.inf
    assert ssd.take("inner").take("a") == 1 and ssd.take("angle").take("b") == 2
    assert [m.take("x") for m in ssd.all("list_of_msgs")] == [1, 2]
    assert root.take("empty").fields == []


def test_last_value_wins_and_defaults():
    root = parse_pbtxt("a: 1 a: 2")
    assert root.take("a") == 2 and root.all("a") == [1, 2]
    assert root.take("missing", 7) == 7


def test_unread_lists_only_fields_never_read():
    root = parse_pbtxt("model { ssd { used: 1 unused: 2 sub { x: 1 } } } top: 3")
    ssd = root.take("model").take("ssd")
    ssd.take("used")
    unread = dict(root.unread())
    assert set(unread) == {"model.ssd.unused", "model.ssd.sub", "top"}
    assert unread["top"] == 1


def test_oneof_needs_exactly_one_field():
    assert parse_pbtxt("w { a { } }").take("w").oneof()[0] == "a"
    with pytest.raises(PbtxtError, match="exactly one"):
        parse_pbtxt("w { a { } b { } }").take("w").oneof()


def test_to_dict():
    root = parse_pbtxt("a: 1 b { c: 'x' } r: 1 r: 2")
    assert root.to_dict() == {"a": 1, "b": {"c": "x"}, "r": [1, 2]}


@pytest.mark.parametrize("text, where", [
    ("a { b: 1", "never closed"),
    ("a: ", "end of text"),
    ("a: 1 }", "line 1, column 6"),
    ("a 1", "expected ':' or '{'"),
    ("a: [1 2]", "expected ',' or ']'"),
    ("x {\n  y: 'bad\\q'\n}", "line 2"),
    ("a: @", "unexpected character '@'"),
])
def test_errors_name_the_place(text, where):
    with pytest.raises(PbtxtError, match=where):
        parse_pbtxt(text)


def test_message_defaults():
    assert Message().names() == []


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/tfod not present")
def test_every_shared_config_and_label_map_parses():
    files = sorted((SHARED / "configs").glob("*.config"))
    files += sorted((SHARED / "label_maps").glob("*.pbtxt"))
    assert len(files) >= 40
    for path in files:
        root = parse_pbtxt(path.read_text())
        assert root.fields, path
    pets = parse_pbtxt((SHARED / "label_maps" / "pet_label_map.pbtxt").read_text())
    items = pets.all("item")
    assert len(items) == 37 and items[0].take("id") == 1 and items[0].take("name") == "Abyssinian"
