"""Checkpoint fingerprints do not move: a workdir written by an earlier jaxdet resumes (and
evaluates) with this one. The expected values are what jaxdet computed at commit 9f0557d, the
last version that landed, for every shipped config; a config field added since must keep the
fingerprint while it has its default (``schema_base.later_field``)."""

from __future__ import annotations

import pytest

from jaxdet.app.runs import config_fingerprint
from jaxdet.config.loader import load_config

LANDED = {
    "efficientdet_d0": "5e3c606a9a8a0bde",
    "efficientdet_d0_shapes": "3e44202dd530fb7c",
    "efficientdet_d1": "31061423d316371e",
    "efficientdet_d2": "4c86f782001cc9a4",
    "efficientdet_d3": "167adf7335b9e8c7",
    "efficientdet_d4": "bc38a3cecd360bc4",
    "efficientdet_d5": "fd3fe6da7ce78e33",
    "efficientdet_d6": "caf33551b7566b88",
    "efficientdet_d7": "8e6ae4ce2aa75339",
    "efficientdet_d7x": "0975b7c649859be5",
    "retinanet_resnet101_fpn_1024": "554367ce7f250a71",
    "retinanet_resnet101_fpn_640": "cd0b47cf048171f0",
    "retinanet_resnet152_fpn_1024": "9a4921cd72695763",
    "retinanet_resnet152_fpn_640": "819fa0647610ff6d",
    "retinanet_resnet50_fpn_1024": "da4b348b879f2475",
    "retinanet_resnet50_fpn_640": "9b061e225b3d5981",
    "shapes_demo": "47eeda994e57327b",
    "ssd_mobilenet_v1_300": "bd3c72cb742b5279",
    "ssd_mobilenet_v1_fpn_640": "16a93d45583bbb33",
    "ssd_mobilenet_v2_320": "58b2f6c15ff9e90f",
    "ssd_mobilenet_v2_fpnlite_320": "d4545bade3c62363",
    "ssd_mobilenet_v2_fpnlite_640": "9b1cb64cc67a1780",
}


@pytest.mark.parametrize("name", sorted(LANDED))
def test_shipped_config_keeps_its_fingerprint(name):
    assert config_fingerprint(load_config(name)) == LANDED[name]


def test_frozen_variables_and_fp16_keep_their_fingerprint():
    config = load_config("shapes_demo", ["train.freeze_variables=['^backbone/']",
                                         "precision=fp16"])
    assert config_fingerprint(config) == "d335eff45d9f7696"


def test_a_later_field_counts_once_it_is_set():
    base = load_config("retinanet_resnet50_fpn_640")
    changed = load_config("retinanet_resnet50_fpn_640", ["model.neck.smooth_top=true"])
    assert config_fingerprint(changed) != config_fingerprint(base)
