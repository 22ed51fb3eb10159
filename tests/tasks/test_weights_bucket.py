"""Weights in a bucket (the GCS emulator of tests/gcs_emulator.py) read as the same files on
local disk: fine-tuning from a TF OD API checkpoint (TF variable names for
``update_trainable_variables`` included), PyTorch weight files, and a jaxdet workdir given as
the checkpoint to start from."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.formats import detect_format
from jaxdet.interop.torch_files import read_torch_weights
from jaxdet.jobs import runs
from jaxdet.tasks.weights import load_weights

FIXTURES = Path(__file__).parents[1] / "interop" / "fixtures"
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


def test_pytorch_weight_files_in_a_bucket_read_as_on_disk(gcs, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    state = {"conv1.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "bn1.num_batches_tracked": np.array(5, np.int64)}
    local = tmp_path / "w.safetensors"
    safetensors_numpy.save_file(state, str(local))
    files_to_read = [(local, gcs.upload(local, "torch/w.safetensors"))]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        pth = tmp_path / "w.pth"
        torch.save({"state_dict": {k: torch.from_numpy(v) for k, v in state.items()}}, pth)
        files_to_read.append((pth, gcs.upload(pth, "torch/w.pth")))
    for on_disk, in_bucket in files_to_read:
        assert detect_format(in_bucket) == "torch"
        got, want = read_torch_weights(in_bucket), read_torch_weights(on_disk)
        assert got.keys() == want.keys() == state.keys()
        for key in state:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    with pytest.raises(FileNotFoundError, match="weight file not found: gs://"):
        read_torch_weights(f"gs://{gcs.bucket}/torch/missing.safetensors")


def test_a_jaxdet_workdir_in_a_bucket_starts_a_model_as_on_disk(gcs, tiny_overrides, tmp_path):
    """A run's workdir uploaded to a bucket, given as the checkpoint (``train.init_checkpoint``,
    ``--checkpoint``): the same weights as from the folder on disk."""
    config = load_config("shapes_demo", tiny_overrides)  # the train step other tests compile
    runs.train(config, tmp_path / "run", stop_after=3, progress=False, evaluate=False)
    remote = gcs.upload(tmp_path / "run", "weights/run")
    assert detect_format(remote) == "jaxdet"
    loaded = {}
    for where, source in (("disk", tmp_path / "run"), ("bucket", remote)):
        task = tasks.build_task(config)
        report = load_weights(task.model, config, source, restore="full")
        assert not report.reinitialized and not report.unused
        loaded[where] = nnx.state(task.model)
    jax.tree.map(np.testing.assert_array_equal, loaded["disk"], loaded["bucket"])


def test_convert_checkpoint_into_a_bucket_workdir_serves_predict(gcs, tmp_path, capsys):
    """``jaxdet convert-checkpoint`` of a TF checkpoint in a bucket into a workdir in the
    bucket: ``predict`` on that workdir finds what it finds on the same import on disk."""
    import json

    from PIL import Image

    from jaxdet import files
    from jaxdet.cli.main import main

    local = rebuild_data(MOBILENET, tmp_path / "zoo" / "checkpoint" / "ckpt-0")
    remote = gcs.upload(local.parent, "convert/zoo/checkpoint") + "/ckpt-0"
    photo = tmp_path / "photos" / "photo.jpg"
    photo.parent.mkdir()
    pixels = np.random.default_rng(0).integers(0, 255, (90, 120, 3), np.uint8)
    Image.fromarray(pixels).save(photo, quality=90)
    results = {}
    for where, workdir, checkpoint in (
            ("bucket", f"gs://{gcs.bucket}/convert/run", remote),
            ("disk", str(tmp_path / "run"), str(local))):
        assert main(["convert-checkpoint", "--pipeline-config",
                     str(MOBILENET / "pipeline.config"), "--checkpoint", checkpoint,
                     "--workdir", workdir]) == 0
        assert f"wrote {workdir}/config.yaml" in capsys.readouterr().out
        out = f"{workdir}/predicted"
        assert main(["predict", "--workdir", workdir, str(photo.parent), "--out", out,
                     "--no-progress"]) == 0
        results[where] = json.loads(files.read_text(f"{out}/predictions.json"))["images"]
    assert files.isfile(f"gs://{gcs.bucket}/convert/run/config.yaml")
    assert results["bucket"] == results["disk"] and results["disk"][0]["detections"]
