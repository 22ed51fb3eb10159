"""``base:`` and ``--set`` with tagged sections: a section whose kind (``type``/``name``)
changes is replaced, not merged; every YAML example of the manual (README and docs) loads;
short runs of shipped configs shorten a warm-up that does not fit (with a warning)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

from jaxdet.config.loader import ConfigError, load_config, load_raw
from jaxdet.train import build as train_build

ROOT = Path(__file__).resolve().parents[2]
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_data_source_of_another_type_replaces_the_base_one(tmp_path):
    """The README's own-data recipe: shapes in the base, COCO in the derived config."""
    path = _write(tmp_path / "mine.yaml", {
        "base": "retinanet_resnet50_fpn_640",
        "model": {"num_classes": 5},
        "data": {"train": {"type": "coco", "annotation_file": "/d/train.json",
                           "image_dir": "/d/train"},
                 "eval": {"type": "voc", "annotation_dir": "/voc/A", "image_dir": "/voc/J"}},
    })
    config = load_config(path)
    assert config.data.train.model_dump() == {
        "type": "coco", "annotation_file": "/d/train.json", "image_dir": "/d/train",
        "class_index": "contiguous", "sample_1_of_n_examples": 1}
    assert config.data.eval.model_dump() == {
        "type": "voc", "annotation_dir": "/voc/A", "image_dir": "/voc/J", "class_names": None,
        "sample_1_of_n_examples": 1}
    # untagged siblings still merge: the base's resizer, augment ops and model stay
    base = load_config("retinanet_resnet50_fpn_640")
    assert config.data.resizer == base.data.resizer and config.data.augment == base.data.augment
    assert config.model.backbone == base.model.backbone and config.model.num_classes == 5


def test_same_type_still_merges_field_by_field(tmp_path):
    path = _write(tmp_path / "more.yaml", {"base": "shapes_demo",
                                          "data": {"train": {"type": "shapes", "seed": 7}}})
    train = load_config(path).data.train
    assert (train.seed, train.num_images, train.output_dir) == (7, 1024, "data/shapes_train")


@pytest.mark.parametrize("section, value, dropped", [
    ("model.neck", {"name": "bifpn", "num_filters": 32}, "depth"),
    ("model.anchors", {"name": "ssd", "num_layers": 3}, "anchor_scale"),
    ("model.head", {"name": "convolutional", "kernel_size": 3}, "num_layers_before_predictor"),
    ("train.learning_rate", {"name": "constant", "learning_rate": 0.1}, "warmup_steps"),
    ("train.optimizer", {"name": "adam"}, "clip_gradient_norm"),
    ("data.resizer", {"name": "keep_aspect_ratio", "min_dimension": 96, "max_dimension": 128},
     "height"),
])
def test_every_tagged_section_is_replaced_when_its_kind_changes(tmp_path, section, value,
                                                                dropped):
    first, second = section.split(".")
    path = _write(tmp_path / "c.yaml", {"base": "shapes_demo", first: {second: value}})
    raw = load_raw(path)
    assert raw[first][second] == value  # nothing of the base's other kind is left
    assert dropped not in raw[first][second]
    config = load_config(path)
    assert getattr(getattr(config, first), second).model_dump(exclude_defaults=True) == value


def test_an_untagged_variant_name_merges(tmp_path):
    """backbone.name picks a variant of one section, not a kind: its siblings carry over."""
    path = _write(tmp_path / "r101.yaml", {"base": "retinanet_resnet50_fpn_640",
                                           "model": {"backbone": {"name": "resnet101"}}})
    backbone = load_config(path).model.backbone
    assert backbone.name == "resnet101" and backbone.activation == "relu6"


def test_set_of_a_tag_replaces_the_section_then_fills_it():
    config = load_config("shapes_demo", [
        "data.train.type=coco", "data.train.annotation_file=/a.json", "data.train.image_dir=/img",
        "model.neck.name=bifpn", "train.optimizer.name=sgd"])
    assert config.data.train.model_dump(exclude_defaults=True) == {
        "type": "coco", "annotation_file": "/a.json", "image_dir": "/img"}
    assert config.model.neck.name == "bifpn" and config.model.neck.num_filters == 64
    assert config.train.optimizer.weight_decay == 0.0  # shapes_demo's 1e-4 was adamw's
    # an augment op in a list changes kind the same way
    changed = load_config("shapes_demo", ["data.augment.0.name=random_adjust_brightness"])
    assert changed.data.augment[0].name == "random_adjust_brightness"
    # setting the same tag again keeps the section
    same = load_config("shapes_demo", ["data.train.type=shapes"])
    assert same.data.train == load_config("shapes_demo").data.train


def test_set_of_a_missing_field_under_a_new_kind_is_named():
    with pytest.raises(ConfigError) as info:
        load_config("shapes_demo", ["data.train.type=coco"])
    message = str(info.value)
    assert "data.train.annotation_file: required field is missing" in message
    assert "output_dir" not in message


def _manual_yaml_blocks() -> list[str]:
    return [block for page in MANUAL
            for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S)]


def test_every_yaml_example_of_the_manual_loads(tmp_path):
    blocks = _manual_yaml_blocks()
    assert len(blocks) >= 4
    for k, text in enumerate(blocks):
        raw = yaml.safe_load(text)
        assert isinstance(raw, dict), text
        complete = "base" in raw
        if not complete:  # a fragment: shown on top of a shipped config
            raw = {"base": "retinanet_resnet50_fpn_640", **raw}
        path = _write(tmp_path / f"block{k}.yaml", raw)
        config = load_config(path)
        for split in ("train", "eval"):
            given = (raw.get("data") or {}).get(split)
            if given:  # the example's data section is what the config holds, nothing more
                held = getattr(config.data, split).model_dump(exclude_defaults=True)
                assert held == {key: _as_held(v, held.get(key)) for key, v in given.items()}


def _as_held(value, held):
    """A YAML value as the schema holds it: lists (and a lone string for a list) as tuples."""
    if isinstance(value, list):
        return tuple(value)
    return (value,) if isinstance(held, tuple) and isinstance(value, str) else value


def test_short_run_of_a_shipped_config_shortens_the_warmup(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        config = load_config("shapes_demo", ["train.num_steps=80"])
    assert config.train.learning_rate.warmup_steps == 8
    message = caplog.text
    assert "train.learning_rate.warmup_steps (100)" in message and "80 steps" in message
    assert "train.num_steps" in message and "shortened to 8" in message
    _, schedule = train_build.build_optimizer(config.train)  # TF's check passes now
    assert float(schedule(8)) == pytest.approx(0.004)
    assert float(schedule(80)) == pytest.approx(0.0, abs=1e-9)


def test_explicit_total_steps_shorter_than_warmup_is_shortened_too(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        config = load_config("retinanet_resnet50_fpn_640", ["train.learning_rate.total_steps=500"])
    assert config.train.learning_rate.warmup_steps == 50
    assert "train.learning_rate.total_steps" in caplog.text


def test_schedule_longer_than_the_run_is_a_warning_only(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        config = load_config("retinanet_resnet50_fpn_640", ["train.num_steps=20000"])
    assert config.train.learning_rate.total_steps == 25000
    assert config.train.learning_rate.warmup_steps == 2000
    assert "train.learning_rate.total_steps (25000) > train.num_steps (20000)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        load_config("retinanet_resnet50_fpn_640")
    assert caplog.text == ""
