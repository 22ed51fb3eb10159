"""Fine-tuning from a TF OD API checkpoint in a bucket (the GCS emulator of
tests/gcs_emulator.py): the same run as from the same checkpoint on local disk, TF variable
names for ``update_trainable_variables`` included."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxdet.app import runs
from jaxdet.config.tfod import load_pipeline_config

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

MOBILENET = FIXTURES / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"

pytestmark = pytest.mark.xdist_group("tf_detectors")


def test_fine_tuning_from_a_bucket_equals_fine_tuning_from_disk(gcs, tmp_path):
    local = rebuild_data(MOBILENET, tmp_path / "zoo" / "checkpoint" / "ckpt-0")
    remote = gcs.upload(local.parent, "fine_tune/zoo/checkpoint") + "/ckpt-0"

    def fine_tune(start: str, workdir: Path) -> dict:
        config = load_pipeline_config(MOBILENET / "pipeline.config", [
            "model.num_classes=3", "data.resizer.height=64", "data.resizer.width=64",
            "data.eval=null", "train.batch_size=2", "train.num_steps=2", "train.ema_decay=null",
            "train.checkpoint_every=2", "parallel.data=1",
            "data.train={type: shapes, output_dir: data/train, num_images: 4, "
            "image_size: [64, 64], num_classes: 3}",
            f"train.init_checkpoint={{path: '{start}', restore: detection}}",
            r"train.update_trainable_variables=['^BoxPredictor/ConvolutionalClassHead_\d/']"])
        return runs.train(config, workdir, progress=False, evaluate=False).state

    from_bucket = fine_tune(remote, tmp_path / "from_bucket")
    from_disk = fine_tune(str(local), tmp_path / "from_disk")
    for part in ("params", "batch_stats"):
        jax.tree.map(np.testing.assert_array_equal, from_bucket[part], from_disk[part])
    names = (tmp_path / "from_bucket" / runs.VARIABLE_NAMES_FILE).read_text()
    assert names == (tmp_path / "from_disk" / runs.VARIABLE_NAMES_FILE).read_text()
