"""One example in every n (the TF OD API input reader's ``sample_1_of_n_examples``): the items
kept, the ground truth scored with them, and the pipeline.config field that sets it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from jaxdet.config import schema as S
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.data.build import build_source
from jaxdet.data.coco import CocoSource
from jaxdet.data.sampling import EveryNth, every_nth
from jaxdet.data.shapes import generate_shapes
from tfod_pipeline import PIPELINE


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    return Path(generate_shapes(tmp_path_factory.mktemp("shapes") / "set", 7,
                                image_size=(32, 32), seed=3))


def test_every_nth_keeps_items_0_n_2n(shapes):
    source = CocoSource(shapes, shapes.parent / "images")
    kept = every_nth(source, 3)
    assert isinstance(kept, EveryNth) and len(kept) == 3  # items 0, 3, 6 of 7
    ids = [int(source[i]["image_id"]) for i in (0, 3, 6)]
    assert [int(kept[i]["image_id"]) for i in range(3)] == ids == kept.image_ids
    truth = kept.ground_truth()
    assert [im["id"] for im in truth["images"]] == ids
    full = source.ground_truth()["annotations"]
    assert truth["annotations"] == [a for a in full if a["image_id"] in ids]
    assert kept.category_names == source.category_names  # the rest is the source's
    assert len(pickle.loads(pickle.dumps(kept))) == 3  # loader workers receive it pickled
    assert every_nth(source, 1) is source
    with pytest.raises(IndexError):
        kept[3]


def test_the_dataset_field_samples_any_source(shapes):
    config = S.CocoDataConfig(type="coco", annotation_file=str(shapes),
                              image_dir=str(shapes.parent / "images"),
                              sample_1_of_n_examples=2)
    assert len(build_source(config)) == 4  # items 0, 2, 4, 6


def test_a_pipeline_configs_sample_1_of_n_examples_is_kept(tmp_path):
    text = PIPELINE.replace('  shuffle: false\n', '  shuffle: false\n  sample_1_of_n_examples: 5\n')
    text = "\n".join(line for line in text.splitlines() if "fine_tune_checkpoint" not in line)
    path = tmp_path / "pipeline.config"
    path.write_text(text)
    config = load_pipeline_config(path)
    assert config.data.eval.sample_1_of_n_examples == 5
    assert config.data.train.sample_1_of_n_examples == 1
