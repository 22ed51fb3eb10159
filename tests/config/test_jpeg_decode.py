"""Which JPEG decode a config gets: TF's for converted pipeline.configs, TF's shipped ports and
TF checkpoints; Pillow's otherwise; an explicit choice always wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxdet.config.loader import ConfigError, load_config
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.data import build as data_build
from jaxdet.jobs import runs

FIXTURE = Path(__file__).parents[1] / "interop" / "fixtures" / \
    "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"


def test_a_converted_pipeline_config_decodes_as_tf():
    config = load_pipeline_config(FIXTURE / "pipeline.config")
    assert config.data.jpeg_decode == "tf" and data_build.decode_mode(config) == "tf"


@pytest.mark.parametrize("name", ["ssd_mobilenet_v2_320", "efficientdet_d3",
                                  "retinanet_resnet101_fpn_640", "faster_rcnn_resnet50_v1_fpn_640",
                                  "centernet_resnet50_v1_fpn_512"])
def test_shipped_tf_ports_decode_as_tf(name):
    assert load_config(name).data.jpeg_decode == "tf"


def test_auto_follows_where_the_weights_come_from(tmp_path):
    config = load_config("shapes_demo")
    assert config.data.jpeg_decode == "auto"
    assert data_build.decode_mode(config) == "accurate"
    assert data_build.decode_mode(config, "tf") == "tf"
    assert data_build.decode_mode(config, "torch") == "accurate"
    (tmp_path / "ckpt-0.index").write_bytes(FIXTURE.joinpath("ckpt-0.index").read_bytes())
    assert runs.weights_format(tmp_path / "ckpt-0") == "tf"
    assert runs.weights_format(None) is None
    init = load_config("shapes_demo", [f"train.init_checkpoint.path={tmp_path / 'ckpt-0'}"])
    assert data_build.decode_mode(init, runs.init_weights_format(init)) == "tf"


def test_an_explicit_choice_wins():
    config = load_config("shapes_demo", ["data.jpeg_decode=accurate"])
    assert data_build.decode_mode(config, "tf") == "accurate"
    tf = load_config("ssd_mobilenet_v2_320", ["data.jpeg_decode=accurate"])
    assert data_build.decode_mode(tf) == "accurate"


def test_a_wrong_value_names_the_choices():
    with pytest.raises(ConfigError, match="jpeg_decode") as e:
        load_config("shapes_demo", ["data.jpeg_decode=fast"])
    assert "accurate" in str(e.value) and "tf" in str(e.value)
    with pytest.raises(ConfigError, match="train_image_dtype"):
        load_config("shapes_demo", ["data.train_image_dtype=float16"])
