"""Keypoint tasks in the config: every inconsistency is refused when the config is read, before
any data or model is touched, with the field and the numbers named."""

import pytest

from jaxdet.config.loader import ConfigError, load_config

SQUARE = "{name: s, class_name: square, keypoints: [a, b, c, d]%s}"
TRIANGLE = "{name: t, class_name: triangle, keypoints: [a, b, c]%s}"


def _tasks(square: str = "", triangle: str = "") -> str:
    return f"model.keypoint_tasks=[{SQUARE % square}, {TRIANGLE % triangle}]"


def _load(*overrides):
    return load_config("centernet_keypoints_shapes_demo", list(overrides))


def test_the_demo_config_lays_seven_keypoints_end_to_end():
    config = _load()
    tasks = config.model.keypoint_tasks
    assert [(t.class_name, len(t.keypoints)) for t in tasks] == [("square", 4), ("triangle", 3)]
    assert config.data.augment[0].keypoint_flip_permutation == (1, 0, 3, 2, 4, 6, 5)


@pytest.mark.parametrize("overrides, message", [
    (["data.augment=[{name: random_horizontal_flip, keypoint_flip_permutation: [1, 0, 2]}]"],
     "data.augment\\[0\\].keypoint_flip_permutation has 3 entries but the model's keypoint "
     "tasks have 7 keypoints"),
    (["data.augment=[{name: random_horizontal_flip, keypoint_flip_permutation: [0, 0]}]"],
     "not a permutation"),
    ([_tasks(square=", std_dev: [1.0, 1.0]")], "std_dev has 2 entries for 4 keypoints"),
    ([_tasks(square=", oks_sigmas: [0.1]")], "oks_sigmas has 1 entries for 4 keypoints"),
    ([_tasks(triangle=", skeleton: [[0, 3]]")], "skeleton edge \\(0, 3\\)"),
    ([_tasks(triangle=", name: s")], "each task needs its own name and class"),
    ([_tasks(square=", keypoints: [a, a]")], "keypoint names repeat"),
])
def test_inconsistent_keypoint_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _load(*overrides)


def test_a_flip_permutation_without_keypoint_tasks_is_refused():
    with pytest.raises(ConfigError, match="the model has no keypoint tasks"):
        load_config("centernet_shapes_demo", [
            "data.augment=[{name: random_horizontal_flip, keypoint_flip_permutation: [0]}]"])
