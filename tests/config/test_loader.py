"""Config loading: actionable error messages, ``--set`` overrides, ``base:`` inheritance."""

from __future__ import annotations

import pytest
import yaml

from jaxdet.config.loader import (
    ConfigError,
    apply_overrides,
    load_config,
    load_raw,
    shipped_config_names,
    validate,
)


def _error(name="shapes_demo", overrides=()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(name, overrides)
    return str(info.value)


def _write(path, data) -> str:
    path.write_text(yaml.safe_dump(data) if isinstance(data, dict) else data)
    return str(path)


# --------------------------------------------------------------------------- error messages


def test_misspelled_field_names_the_path_and_suggests_the_nearest_name():
    message = _error(overrides=["model.head.dept=64"])
    assert "shapes_demo: 1 problem(s)" in message
    # the union tag ('weight_shared') is not part of the path the user wrote
    assert "model.head.dept: unknown field 'dept'. Did you mean: depth?" in message
    assert "Valid fields here:" in message and "num_layers_before_predictor" in message


def test_misspelled_field_in_a_file(tmp_path):
    path = _write(tmp_path / "typo.yaml", {"base": "shapes_demo", "train": {"num_step": 5}})
    message = _error(path)
    assert "train.num_step: unknown field 'num_step'. Did you mean: num_steps" in message


def test_misspelled_top_level_section():
    message = _error(overrides=["trian.num_steps=5"])
    assert "trian: unknown field 'trian'. Did you mean: train?" in message


def test_bad_literal_lists_the_allowed_values():
    message = _error(overrides=["model.loss.classification=focal"])
    assert "model.loss.classification:" in message
    for allowed in ("sigmoid_focal", "weighted_sigmoid", "softmax"):
        assert allowed in message
    assert "'focal'" in message


def test_bad_union_tag_lists_the_allowed_names():
    message = _error(overrides=["model.neck.name=nasfpn"])
    expected = ("model.neck: 'nasfpn' is not a valid 'name'; allowed: 'fpn', 'ssd_feature_maps', "
                "'bifpn'")
    assert expected in message
    message = _error(overrides=["data.train.type=kitti"])
    assert "data.train: 'kitti'" in message
    for allowed in ("coco", "voc", "shapes"):
        assert f"'{allowed}'" in message


def test_missing_required_fields_are_each_named():
    raw = load_raw("shapes_demo")
    del raw["model"]["num_classes"]
    del raw["data"]["resizer"]["height"]
    with pytest.raises(ConfigError) as info:
        validate(raw, source="mine.yaml")
    message = str(info.value)
    assert "mine.yaml: 2 problem(s)" in message
    assert "model.num_classes: required field is missing" in message
    assert "data.resizer.height: required field is missing" in message


def test_out_of_range_value_names_the_field():
    message = _error(overrides=["model.matcher.matched_threshold=1.5"])
    assert "model.matcher.matched_threshold:" in message and "1.5" in message


def test_manual_step_rates_must_be_one_longer_than_boundaries():
    bad = "train.learning_rate={name: manual_step, boundaries: [10, 20], rates: [0.1, 0.01]}"
    message = _error(overrides=[bad])
    assert "train.learning_rate:" in message
    assert "rates needs len(boundaries) + 1 = 3 values, got 2" in message
    good = "train.learning_rate={name: manual_step, boundaries: [10, 20], rates: [1, 0.1, 0.01]}"
    lr = load_config("shapes_demo", [good]).train.learning_rate
    assert (lr.boundaries, lr.rates) == ((10, 20), (1.0, 0.1, 0.01))


def test_matcher_thresholds_must_be_ordered():
    message = _error(overrides=["model.matcher.unmatched_threshold=0.7"])
    assert "model.matcher:" in message
    assert "unmatched_threshold (0.7) must be <= matched_threshold (0.5)" in message
    matcher = load_config("shapes_demo", ["model.matcher.unmatched_threshold=0.5"]).model.matcher
    assert matcher.unmatched_threshold == matcher.matched_threshold == 0.5


def test_fpn_levels_must_be_ordered():
    message = _error(overrides=["model.neck.min_level=6"])
    assert "model.neck:" in message and "min_level (6) > max_level (5)" in message


# --------------------------------------------------------------------------- --set overrides


def test_overrides_set_scalars_with_yaml_types():
    config = load_config(
        "shapes_demo",
        ["train.num_steps=7", "train.learning_rate.learning_rate_base=1e-3", "precision=bf16"],
    )
    assert config.train.num_steps == 7
    assert config.train.learning_rate.learning_rate_base == 0.001
    assert config.precision == "bf16"


def test_overrides_index_into_lists():
    config = load_config(
        "shapes_demo",
        ["data.augment.0.probability=0.25", "model.anchors.aspect_ratios.-1=0.25"],
    )
    assert config.data.augment[0].probability == 0.25
    assert config.model.anchors.aspect_ratios == (1.0, 2.0, 0.25)


def test_overrides_replace_whole_lists_and_sections():
    config = load_config(
        "shapes_demo",
        [
            "data.augment=[{name: random_horizontal_flip}, {name: ssd_random_crop}]",
            "train.optimizer={name: sgd}",
        ],
    )
    assert [op.name for op in config.data.augment] == ["random_horizontal_flip", "ssd_random_crop"]
    assert config.train.optimizer.name == "sgd"


def test_overrides_create_nested_new_keys():
    config = load_config(
        "shapes_demo", ["model.head.batch_norm.decay=0.9", "train.ema_decay=0.999"]
    )
    assert config.model.head.batch_norm.decay == 0.9
    assert config.model.head.batch_norm.epsilon == 0.001  # the rest keeps its default
    assert config.train.ema_decay == 0.999


def test_overrides_do_not_change_the_input():
    raw = load_raw("shapes_demo")
    before = yaml.safe_dump(raw)
    apply_overrides(raw, ["data.augment.0.probability=0.1", "model.head.depth=8"])
    assert yaml.safe_dump(raw) == before


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.augment.3.probability=0.2", "'3' is not an index of a 1-item list"),
        ("data.augment.first.probability=0.2", "'first' is not an index of a 1-item list"),
        ("train.num_steps", "must look like section.field=value"),
    ],
)
def test_bad_overrides_are_explained(override, expected):
    assert expected in _error(overrides=[override])


def test_override_with_unknown_new_key_is_reported_like_a_typo():
    message = _error(overrides=["model.head.batch_norm.decey=0.9"])
    assert "model.head.batch_norm.decey: unknown field 'decey'. Did you mean: decay?" in message


# --------------------------------------------------------------------------- base: inheritance


def test_base_by_shipped_name_merges_nested_sections(tmp_path):
    path = _write(
        tmp_path / "child.yaml",
        {
            "base": "shapes_demo",
            "name": "child",
            "model": {"head": {"depth": 32}},
            "train": {"num_steps": 3},
        },
    )
    config = load_config(path)
    parent = load_config("shapes_demo")
    assert config.name == "child"
    assert config.model.head.depth == 32
    # siblings of the changed keys come from the base
    assert config.model.head.model_copy(update={"depth": 48}) == parent.model.head
    assert config.train.num_steps == 3 and config.train.batch_size == parent.train.batch_size
    assert config.data == parent.data


def test_base_by_relative_path_and_overrides_on_top(tmp_path):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "parent.yaml", {"base": "shapes_demo", "train": {"num_steps": 11}})
    path = _write(tmp_path / "sub" / "child.yaml", {"base": "parent.yaml", "train": {"seed": 4}})
    config = load_config(path, ["train.batch_size=2"])
    assert (config.train.num_steps, config.train.seed, config.train.batch_size) == (11, 4, 2)


def test_shipped_variants_inherit():
    config = load_config("retinanet_resnet101_fpn_1024")
    assert config.model.backbone.name == "resnet101"
    assert config.data.resizer.height == 1024
    # inherited through two levels: retinanet_resnet50_fpn_1024 -> retinanet_resnet50_fpn_640
    assert config.model.backbone.batch_norm.decay == 0.997
    base = load_config("retinanet_resnet50_fpn_640")
    assert config.data.train.num_images == base.data.train.num_images


def test_inheritance_loop_is_detected(tmp_path):
    _write(tmp_path / "a.yaml", {"base": "b.yaml"})
    _write(tmp_path / "b.yaml", {"base": "a.yaml"})
    message = _error(str(tmp_path / "a.yaml"))
    assert "config inheritance loops" in message
    assert "a.yaml" in message and "b.yaml" in message


def test_self_inheritance_is_a_loop(tmp_path):
    path = _write(tmp_path / "me.yaml", {"base": "me.yaml"})
    assert "config inheritance loops" in _error(path)


def test_missing_base_is_reported(tmp_path):
    path = _write(tmp_path / "orphan.yaml", {"base": "no_such_parent.yaml"})
    assert (f"config file not found: no_such_parent.yaml (looked in the current folder and in "
            f"{tmp_path})") in _error(path)


# --------------------------------------------------------------------------- names and files


def test_unknown_shipped_name_suggests_close_names():
    """A bare name: the close shipped names and where the whole list is, in one line (not the
    35 names); a path that does not exist says so, and a .yaml name its shipped twin."""
    message = _error("retinanet_resnet50_fpn_64")
    assert message.startswith("'retinanet_resnet50_fpn_64' is neither a shipped config nor an "
                              "existing file or folder; did you mean retinanet_resnet50_fpn_640")
    assert message.endswith("(`jaxdet configs` lists the shipped configs)")
    assert "shapes_demo" not in message and "\n" not in message
    assert _error("configs/mine.yaml") == "config file not found: configs/mine.yaml"
    assert _error("shapes_dem.yaml") == ("config file not found: shapes_dem.yaml; did you mean "
                                         "the shipped config shapes_demo?")


def test_shipped_name_with_yaml_suffix_resolves():
    assert load_config("shapes_demo.yaml").name == "shapes_demo"


def test_shipped_config_names_lists_the_configs_folder():
    names = shipped_config_names()
    assert names == sorted(names)
    assert {"shapes_demo", "retinanet_resnet50_fpn_640", "ssd_mobilenet_v2_320"} <= set(names)


def test_invalid_yaml_and_non_mapping_are_explained(tmp_path):
    broken = _write(tmp_path / "broken.yaml", "model: {num_classes: 3\n")
    assert "not valid YAML" in _error(broken)
    listing = _write(tmp_path / "list.yaml", "- a\n- b\n")
    assert "a config must be a mapping at the top level" in _error(listing)


def test_a_derived_config_describes_itself_not_its_base(tmp_path):
    """A file with ``base:`` that sets neither ``name`` nor ``description`` is named after
    itself and says what it changes (the base's "90 COCO classes" would be false)."""
    from jaxdet.config.loader import load_config

    (tmp_path / "my.yaml").write_text("base: retinanet_resnet50_fpn_640\n"
                                      "model: {num_classes: 5}\n"
                                      "data: {train: {type: coco, annotation_file: a.json, "
                                      "image_dir: img}}\n")
    config = load_config(tmp_path / "my.yaml")
    assert config.name == "my" and config.model.num_classes == 5
    assert config.description == ("based on retinanet_resnet50_fpn_640, setting "
                                  "model.num_classes, data.train")
    (tmp_path / "named.yaml").write_text("base: retinanet_resnet50_fpn_640\nname: mine\n"
                                         "description: five classes\n")
    named = load_config(tmp_path / "named.yaml")
    assert (named.name, named.description) == ("mine", "five classes")
    assert "90 COCO classes" in load_config("retinanet_resnet50_fpn_640").description
