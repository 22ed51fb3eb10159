"""Checkpoint fingerprints do not move: a workdir written by an earlier jaxdet resumes (and
evaluates) with this one. The expected values are what jaxdet computed at commit 9f0557d, the
last version that landed, for every shipped config; a config field added since must keep the
fingerprint while it has its default (``schema_base.later_field``).

One deliberate move since: the TF ports' momentum optimizers keep TF's form
(``train.optimizer.momentum_form: keras``), whose optimizer state is another tree; their
earlier runs resume with ``--set train.optimizer.momentum_form=optax``, which gives back the
fingerprint of 9f0557d (checked below)."""

from __future__ import annotations

import pytest

from jaxdet.config.loader import load_config
from jaxdet.jobs.runs import config_fingerprint

LANDED = {
    "efficientdet_d0": "c4ba559fbc658f7f",
    "efficientdet_d0_shapes": "3e44202dd530fb7c",
    "efficientdet_d1": "da12984f35cc12c4",
    "efficientdet_d2": "f56aa835a0e3e1fc",
    "efficientdet_d3": "b453b7cf5533acaf",
    "efficientdet_d4": "a545208b80d48ad4",
    "efficientdet_d5": "8655d0bc488f819d",
    "efficientdet_d6": "60d28ca0e7f4b298",
    "efficientdet_d7": "ee91a23b0645dd0c",
    "efficientdet_d7x": "0151b5b6c4ddad01",
    "retinanet_resnet101_fpn_1024": "05475957ae80134d",
    "retinanet_resnet101_fpn_640": "593d187633a05e3b",
    "retinanet_resnet152_fpn_1024": "40004093a27c8974",
    "retinanet_resnet152_fpn_640": "f6376004cc07ee4c",
    "retinanet_resnet50_fpn_1024": "52ce25658eb98859",
    "retinanet_resnet50_fpn_640": "d61dbf6fed0f50a1",
    "shapes_demo": "47eeda994e57327b",
    "ssd_mobilenet_v1_300": "bd3c72cb742b5279",
    "ssd_mobilenet_v1_fpn_640": "19928d897166c8e2",
    "ssd_mobilenet_v2_320": "406a0200fa472a28",
    "ssd_mobilenet_v2_fpnlite_320": "745b2eb938c90bbd",
    "ssd_mobilenet_v2_fpnlite_640": "e2005203a70cb2bb",
}


@pytest.mark.parametrize("name", sorted(LANDED))
def test_shipped_config_keeps_its_fingerprint(name):
    assert config_fingerprint(load_config(name)) == LANDED[name]



@pytest.mark.parametrize("name,landed", [("ssd_mobilenet_v2_320", "58b2f6c15ff9e90f"),
                                         ("efficientdet_d0", "5e3c606a9a8a0bde"),
                                         ("retinanet_resnet50_fpn_640", "9b061e225b3d5981")])
def test_a_tf_port_in_optax_momentum_form_has_its_earlier_fingerprint(name, landed):
    config = load_config(name, ["train.optimizer.momentum_form=optax"])
    assert config_fingerprint(config) == landed != config_fingerprint(load_config(name))

def test_frozen_variables_and_fp16_keep_their_fingerprint():
    config = load_config("shapes_demo", ["train.freeze_variables=['^backbone/']",
                                         "precision=fp16"])
    assert config_fingerprint(config) == "d335eff45d9f7696"


def test_a_later_field_counts_once_it_is_set():
    base = load_config("retinanet_resnet50_fpn_640")
    changed = load_config("retinanet_resnet50_fpn_640", ["model.neck.smooth_top=true"])
    assert config_fingerprint(changed) != config_fingerprint(base)
