"""The TF2 zoo's Faster R-CNN configs, converted, train a step: the ResNet-50 FPN one and the
Mask R-CNN (Inception-ResNet-v2, with its mask loss) by default, the 9 C4 ones under
``--exhaustive``. Each at a small input, batch 1,
through the generic train step: a finite positive loss and every parameter moved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.tfod import load_pipeline_config

from .conftest import train_one_step

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")
pytestmark = pytest.mark.slow
MAX_BOXES = 4

R50_FPN = "faster_rcnn_resnet50_v1_fpn_640x640_coco17_tpu-8"
MASK_RCNN = "mask_rcnn_inception_resnet_v2_1024x1024_coco17_gpu-8"
# the C4 network is the shapes demos' one, trained in tests/e2e and tests/train
C4 = [f"faster_rcnn_resnet{d}_v1_{s}_coco17_{hw}-8" for d in (50, 101, 152)
      for s, hw in (("640x640", "tpu"), ("1024x1024", "tpu"), ("800x1333", "gpu"))]


def _config(name: str, size: int):
    resizer = ([f"data.resizer.height={size}", f"data.resizer.width={size}"]
               if name == MASK_RCNN else
               [f"data.resizer.min_dimension={size}", f"data.resizer.max_dimension={size}"])
    return load_pipeline_config(TFOD_CONFIGS / f"{name}.config", [
        *resizer, "train.batch_size=1", f"data.max_number_of_boxes={MAX_BOXES}",
        "model.first_stage_max_proposals=32", "model.second_stage_batch_size=16",
        "precision=fp32"])


def _batch(task, size: int) -> dict:
    """One image with two boxes (and, for Mask R-CNN, their filled-box masks)."""
    layout = task.batch_layout()
    rng = np.random.default_rng(0)
    batch = {k: np.zeros((1, *f.shape), f.dtype) for k, f in layout.items()}
    batch["images"] = rng.normal(size=batch["images"].shape).astype(np.float32)
    batch["boxes"][0, :2] = [[0.1, 0.1, 0.6, 0.5], [0.3, 0.4, 0.9, 0.95]]
    batch["classes"][0, :2] = [0, 5]
    batch["valid"][0, :2] = True
    batch["image_info"][0] = [size, size, size, size]
    if "masks" in batch:
        _, _, mh, mw = batch["masks"].shape
        for i, (y0, x0, y1, x1) in enumerate(batch["boxes"][0, :2]):
            batch["masks"][0, i, int(y0 * mh):int(y1 * mh), int(x0 * mw):int(x1 * mw)] = 1
    return batch


def _train_one_step(name: str, size: int) -> dict:
    config = _config(name, size)
    task = tasks.build_task(config, seed=0)
    return train_one_step(config, task, _batch(task, size))


@needs_shared
# the Mask R-CNN Inception-ResNet-v2 config (37 s) under -m exhaustive: Mask R-CNN trains end
# to end in the default suite, and the backbone is checked against TF on its own
# under -m exhaustive (41 s cold): make test keeps the conversion (test_tfod_faster_rcnn.py),
# Faster R-CNN FPN's step on a mesh and Faster R-CNN trained end to end
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [R50_FPN, MASK_RCNN])
def test_converted_config_trains_a_step(name):
    metrics = _train_one_step(name, 128)
    assert float(metrics["num_proposals"]) > 0
    assert ("second_stage_mask_loss" in metrics) == (name == MASK_RCNN)


@needs_shared
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", C4)
def test_c4_configs_train_a_step(name):
    _train_one_step(name, 128)
