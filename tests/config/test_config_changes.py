"""Resuming with a changed config: training fields named old -> new, the data refused."""

import pytest
import yaml

from jaxdet.config.changes import (
    DataChanged,
    check_resume,
    config_changes,
    describe,
    keep_previous,
)

OLD = {"name": "a", "train": {"batch_size": 8, "learning_rate": {"name": "cosine", "base": 0.1},
                              "log_every": 10},
       "data": {"worker_count": 0, "train": {"type": "shapes", "num_images": 24}}}


def _with(**edits):
    new = yaml.safe_load(yaml.safe_dump(OLD))
    for dotted, value in edits.items():
        *path, last = dotted.split("__")
        node = new
        for key in path:
            node = node[key]
        node[last] = value
    return new


def test_changes_are_named_with_old_and_new_values():
    new = _with(train__batch_size=16, train__learning_rate__base=0.05, train__log_every=1,
                data__worker_count=4, name="b")
    changes = config_changes(OLD, new)
    assert changes == {"train.batch_size": (8, 16), "train.learning_rate.base": (0.1, 0.05)}
    assert describe(changes) == "train.batch_size 8 -> 16, train.learning_rate.base 0.1 -> 0.05"
    newer = _with()
    newer["data"]["jpeg_decode"] = "auto"  # a field a later version added: not a change
    assert config_changes(OLD, newer) == {}


def test_resume_check_refuses_other_data_and_keeps_the_old_config(tmp_path):
    assert check_resume(tmp_path, OLD) == {}  # a fresh workdir
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(OLD))
    assert check_resume(tmp_path, _with(train__batch_size=4)) == {"train.batch_size": (8, 4)}
    with pytest.raises(DataChanged, match=r"data.train.num_images 24 -> 48"):
        check_resume(tmp_path, _with(data__train__num_images=48))
    assert keep_previous(tmp_path).name == "config.yaml.1"
    (tmp_path / "config.yaml").write_text("new")
    assert keep_previous(tmp_path).name == "config.yaml.2"
    assert yaml.safe_load((tmp_path / "config.yaml.1").read_text()) == OLD
