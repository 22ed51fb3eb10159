"""TF's export commands run by jaxdet, as TF's docs call them (only the program's name
changed): ``exporter_main_v2`` writes TF's layout (``saved_model/``, ``pipeline.config`` with
``--config_override`` merged) whose SavedModel gives ``jaxdet predict``'s detections, from a
jaxdet run or a TF model_dir; ``export_tflite_graph_tf2`` writes the SavedModel that TF's own
``tflite_convert`` turns into a TFLite file giving the same detections. Needs TensorFlow
(``make test-tf-export``); without it the suite checks the one-line refusal instead."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from jaxdet.config.tfod import load_pipeline_config
from jaxdet.config.tfod_proto import pipeline_message
from jaxdet.export.runtimes import assert_same_detections, load_artifact, predict_as_signature
from tfod_pipeline import write_pipeline
from untrained_workdir import untrained_workdir

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="TF's exporters need TensorFlow: `make test-tf-export`")]

BIN = Path(sys.executable).parent
FIXTURE = Path(__file__).parents[1] / "interop" / "fixtures" / "tf_model_dir"
sys.path.insert(0, str(FIXTURE.parent))
from tf_fixture_values import rebuild_data  # noqa: E402

# exporter_main_v2.py's own usage example, its override made for an SSD
EXPORT = """
exporter_main_v2 \\
    --input_type image_tensor \\
    --pipeline_config_path {pipeline} \\
    --trained_checkpoint_dir {checkpoint} \\
    --output_directory {out} \\
    --config_override " \\
            model{{ \\
              ssd {{ \\
                post_processing {{ \\
                  batch_non_max_suppression {{ \\
                    max_total_detections: 5 \\
                  }} \\
                }} \\
              }} \\
            }}"
"""
# running_on_mobile_tf2.md's two steps
TFLITE = """
export_tflite_graph_tf2 \\
    --pipeline_config_path {pipeline} \\
    --trained_checkpoint_dir {checkpoint} \\
    --output_directory {out}
tflite_convert --saved_model_dir={out}/saved_model --output_file={out}/model.tflite
"""


def shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(pipeline.config, a jaxdet run of it at step 0)."""
    root = tmp_path_factory.mktemp("tfod_export")
    pipeline = write_pipeline(root, fine_tune_placeholder=False)
    workdir = untrained_workdir(load_pipeline_config(pipeline), root / "run")
    return pipeline, workdir


def _images(n: int = 2) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, 64, 64, 3)).astype(np.uint8)


def _predict(config, workdir, images, checkpoint=None) -> dict:
    import jax

    from jaxdet.jobs import runs
    from jaxdet.jobs.detector import preprocess_images

    task, state, _ = runs.load_for_inference(config, None if checkpoint else workdir,
                                             checkpoint=checkpoint,
                                             checkpoint_format="tf" if checkpoint else "auto")
    x, info = preprocess_images(config, images)
    return jax.device_get(jax.jit(task.predict)(*runs.inference_variables(config, state),
                                                x, info))


def test_exporter_main_v2_writes_tfs_layout(run, tmp_path):
    pipeline, workdir = run
    out = tmp_path / "exported"
    done = shell(EXPORT.format(pipeline=pipeline, checkpoint=workdir, out=out), tmp_path)
    assert done.stdout.startswith(f"wrote {out}/saved_model, checkpoint, pipeline.config and "
                                  "signature.json")
    # checkpoint/ckpt-0: the weights as TF's exporter leaves them, a TF2 checkpoint
    from jaxdet.interop.tf_checkpoint import TfCheckpoint

    written = TfCheckpoint(out / "checkpoint")
    assert len([p for p in written.variables() if p.startswith("model/")]) == 306
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "pipeline.config",
                                                     "saved_model", "signature.json"]
    written = pipeline_message()
    text_format.Merge((out / "pipeline.config").read_text(), written)
    assert written.model.ssd.post_processing.batch_non_max_suppression \
        .max_total_detections == 5  # the override merged, as TF merges it
    config = load_pipeline_config(out / "pipeline.config")
    images = _images()
    got = load_artifact(out)(images)
    assert got["detection_boxes"].shape == (2, 5, 4)
    assert (got["num_detections"] == 5).all()  # the config's score threshold is 0
    want = predict_as_signature(_predict(config, workdir, images), (64, 64), np.arange(1, 4))
    assert_same_detections(got, want)

    # exported again into the same folder (a script run twice): replaced, as TF overwrites
    again = shell(EXPORT.format(pipeline=pipeline, checkpoint=workdir, out=out)
                  .replace("max_total_detections: 5", "max_total_detections: 7"), tmp_path)
    assert again.returncode == 0
    assert load_artifact(out)(images)["detection_boxes"].shape == (2, 7, 4)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "pipeline.config",
                                                     "saved_model", "signature.json"]


def test_exporter_main_v2_reads_a_tf_model_dir(run, tmp_path):
    """``--trained_checkpoint_dir`` a TF model_dir (the checkpoint's latest ``ckpt-N``)."""
    pipeline, _ = run
    model_dir = tmp_path / "tf_run"
    rebuild_data(FIXTURE, model_dir / "ckpt-1", "ckpt-1.index")
    shutil.copy(FIXTURE / "checkpoint", model_dir / "checkpoint")
    out = tmp_path / "exported"
    shell(EXPORT.format(pipeline=pipeline, checkpoint=model_dir, out=out), tmp_path)
    config = load_pipeline_config(out / "pipeline.config")
    images = _images()
    want = predict_as_signature(_predict(config, None, images, model_dir / "ckpt-1"), (64, 64),
                                np.arange(1, 4))
    assert_same_detections(load_artifact(out)(images), want)


def test_export_tflite_graph_tf2_then_tflite_convert(run, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    pipeline, workdir = run
    out = tmp_path / "tflite_export"
    shell(TFLITE.format(pipeline=pipeline, checkpoint=workdir, out=out), tmp_path)
    runner = Interpreter(model_path=str(out / "model.tflite")).get_signature_runner(
        "serving_default")
    config = load_pipeline_config(out / "pipeline.config")
    assert config.model.post_processing.max_total_detections == 10  # TF's --max_detections
    images = _images(1)
    got = runner(input_tensor=images)
    assert got["detection_boxes"].shape == (1, 10, 4)
    assert (got["num_detections"] == 10).all()
    want = predict_as_signature(_predict(config, workdir, images), (64, 64), np.arange(1, 4))
    assert_same_detections(got, want)
