"""Checkpoint name maps are the families' own: a family without one is named in the error."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.tfod_names import UnmappedModelError
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.weights import load_weights

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_a_family_without_tf_checkpoints_is_named():
    """The 3D U-Net has no TF OD API map: the error names its model.type."""
    config = load_config("unet3d_demo")
    model = abstract_build(lambda: tasks.build_task(config, seed=0).model)
    with pytest.raises(UnmappedModelError, match="model.type='unet3d'"):
        tasks.tf_name_map(model, config)


@pytest.mark.slow
def test_every_detector_family_has_a_tf_map():
    """SSD, CenterNet and Faster R-CNN each map their own model (non-empty, every target a
    variable path of that model)."""
    for name in ("retinanet_resnet50_fpn_640", "centernet_resnet50_v1_fpn_512",
                 "faster_rcnn_resnet50_v1_640"):
        config = load_config(name)
        model = abstract_build(lambda config=config: tasks.build_task(config, seed=0).model)
        mapping = tasks.tf_name_map(model, config)
        assert len(mapping) > 20, name


def test_a_whole_detector_file_into_a_family_without_its_map(tmp_path):
    """An effdet EfficientDet state dict (``backbone.*``, ``fpn.*``, ``class_net.*``) restored
    in full into a CenterNet: no family map reads it, so the error says to restore the
    backbone alone; the model is left as it was."""
    config = load_config("centernet_shapes_demo")
    model = tasks.build_task(config, seed=0).model
    path = tmp_path / "effdet.safetensors"
    safetensors_numpy.save_file({"backbone.conv_stem.weight": np.zeros((8, 3, 3, 3), np.float32),
                                 "fpn.cell.0.weight": np.zeros((4,), np.float32),
                                 "class_net.head.weight": np.zeros((4,), np.float32)}, str(path))
    with pytest.raises(CheckpointError, match=r"model.type='center_net' has no map for.*"
                                              r"restore: classification"):
        load_weights(model, config, path, restore="full")
