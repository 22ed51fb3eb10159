"""The TF OD API's own command lines, run by jaxdet: the TF2 tutorial's training and evaluation
commands verbatim (``tf2_training_and_evaluation.md``; only the program's name changed, the
installed ``model_main_tf2`` in place of ``python object_detection/model_main_tf2.py``), in a
shell as a team's scripts run them, on a pipeline.config and TFRecords."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tensorboard_events import read_scalars
from tfod_pipeline import write_pipeline

# one worker for both tests: the second's two processes load the train and eval programs the
# first's compiled from the persistent cache (same pipeline.config, same shapes)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tfod_commands")]

BIN = Path(sys.executable).parent  # the venv's console scripts
FIXTURE = Path(__file__).parents[1] / "interop" / "fixtures" / "tf_model_dir"
sys.path.insert(0, str(FIXTURE.parent))
from tf_fixture_values import rebuild_data  # noqa: E402

TRAIN = """
PIPELINE_CONFIG_PATH={pipeline}
MODEL_DIR={model_dir}
model_main_tf2 \\
    --pipeline_config_path=${{PIPELINE_CONFIG_PATH}} \\
    --model_dir=${{MODEL_DIR}} \\
    --alsologtostderr
"""
EVALUATE = """
PIPELINE_CONFIG_PATH={pipeline}
MODEL_DIR={model_dir}
CHECKPOINT_DIR=${{MODEL_DIR}}
MODEL_DIR={model_dir}
model_main_tf2 \\
    --pipeline_config_path=${{PIPELINE_CONFIG_PATH}} \\
    --model_dir=${{MODEL_DIR}} \\
    --checkpoint_dir=${{CHECKPOINT_DIR}} \\
    --alsologtostderr
"""


def shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    return write_pipeline(tmp_path_factory.mktemp("tfod"), fine_tune_placeholder=False)


def test_the_tutorials_training_and_evaluation_commands(pipeline, tmp_path):
    """Training writes a jaxdet run in MODEL_DIR and evaluates nothing (TF's training job
    does not); the evaluation job reads its checkpoints, evaluates the last step into
    MODEL_DIR and ends there; TensorBoard holds TF's tags in MODEL_DIR/train and /eval."""
    model_dir = tmp_path / "run"
    trained = shell(TRAIN.format(pipeline=pipeline, model_dir=model_dir), tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert trained.stdout.startswith("trained 3 steps (1-3)")
    assert (model_dir / "checkpoints").is_dir() and not (model_dir / "eval").exists()

    evaluated = shell(EVALUATE.format(pipeline=pipeline, model_dir=model_dir), tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stdout.splitlines()[-1] == "evaluated 1 checkpoint(s): steps 3"
    metrics = json.loads((model_dir / "eval" / "step_3" / "metrics.json").read_text())
    assert metrics["num_images"] == 6 and metrics["step"] == 3
    # TensorBoard as TF lays it out, under TF's tags: a TF dashboard shows the run
    train = {tag for tag, _ in read_scalars(model_dir / "train")}
    assert {"Loss/total_loss", "Loss/classification_loss", "Loss/localization_loss",
            "Loss/regularization_loss", "learning_rate", "steps_per_sec"} <= train
    scalars = read_scalars(model_dir / "eval")
    assert scalars["DetectionBoxes_Precision/mAP", 3] == pytest.approx(metrics["AP"])
    assert scalars["DetectionBoxes_Recall/AR@100 (large)", 3] == pytest.approx(metrics["ARl"])
    assert ("PascalBoxes_Precision/mAP@0.5IOU", 3) in scalars
    assert not (model_dir / "tensorboard").exists()



def test_a_tf_model_dir_is_evaluated_and_continued(pipeline, tmp_path):
    """TF's evaluator job beside TF's own trainer: ``--checkpoint_dir`` a TF model_dir
    (``ckpt-1`` written by TF at step 2, optimizer slots and all), evaluated by its step into
    another ``--model_dir``, one eval example in two, the model's every tensor read (a depth
    multiplier of 0.25: TF's scaled MobileNetV2 head and FPN depth). Then the tutorial's
    training command on that model_dir goes on with TF's run from step 2 (weights, momentum
    slots and step: the continuation's losses are checked against TF's own in
    ``tests/interop/test_tf_model_dir.py``)."""
    model_dir = tmp_path / "tf_run"
    rebuild_data(FIXTURE, model_dir / "ckpt-1", "ckpt-1.index")
    shutil.copy(FIXTURE / "checkpoint", model_dir / "checkpoint")
    done = shell(f"model_main_tf2 --pipeline_config_path={pipeline} --model_dir=evaluated "
                 f"--checkpoint_dir={model_dir} --num_train_steps=2 --eval_timeout=60 "
                 "--sample_1_of_n_eval_examples=2", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "evaluated 1 checkpoint(s): steps 2"
    assert ", 0 re-initialised, 0 unused in the checkpoint" in done.stderr, done.stderr
    evaluated = tmp_path / "evaluated"  # --model_dir: where the results go
    metrics = json.loads((evaluated / "eval" / "step_2" / "metrics.json").read_text())
    assert metrics["num_images"] == 3  # eval images 0, 2 and 4 of 6
    assert ("DetectionBoxes_Precision/mAP", 2) in read_scalars(evaluated / "eval")
    assert not (model_dir / "eval").exists()

    trained = shell(TRAIN.format(pipeline=pipeline, model_dir=model_dir), tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert (f"continuing the TF OD API run of {model_dir}/ckpt-1 at step 2: 306 weights, "
            "optimizer slots: 186 'momentum'") in trained.stderr
    assert trained.stdout.startswith("trained 1 steps (3-3)")
    assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == ["2", "3"]
