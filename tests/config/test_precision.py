"""``use_bfloat16`` means what it means in TF: bfloat16 when training or evaluating on a TPU,
float32 on CPUs and GPUs and for predict, load and export everywhere; an explicit
``precision`` is what it says on every platform. The platform is a parameter: no TPU needed."""

from __future__ import annotations

import logging
from pathlib import Path

import jax.numpy as jnp
import pytest

from jaxdet.config.loader import load_config
from jaxdet.config.precision import job_precision, resolve_precision
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.core.precision import compute_dtype
from jaxdet.jobs import runs

TFOD_CONFIGS = Path(__file__).resolve().parents[3] / "shared" / "data" / "tfod" / "configs"
PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]
PIPELINE = """
model { ssd { num_classes: 3 image_resizer { fixed_shape_resizer { height: 64 width: 64 } }
  feature_extractor { type: "ssd_mobilenet_v2_keras" depth_multiplier: 0.35 min_depth: 8
    conv_hyperparams { regularizer { l2_regularizer { weight: 4e-5 } }
      initializer { truncated_normal_initializer { stddev: 0.03 } } } }
  box_coder { faster_rcnn_box_coder {} } matcher { argmax_matcher {} }
  similarity_calculator { iou_similarity {} }
  anchor_generator { ssd_anchor_generator { num_layers: 6 } }
  box_predictor { convolutional_box_predictor { kernel_size: 3
    conv_hyperparams { regularizer { l2_regularizer { weight: 4e-5 } }
      initializer { truncated_normal_initializer { stddev: 0.03 } } } } }
  post_processing { batch_non_max_suppression { max_detections_per_class: 10
    max_total_detections: 10 } score_converter: SIGMOID }
  loss { classification_loss { weighted_sigmoid_focal {} }
    localization_loss { weighted_smooth_l1 {} } } } }
train_config { batch_size: 2 num_steps: 10 %s
  optimizer { momentum_optimizer { learning_rate { constant_learning_rate {
    learning_rate: 0.01 } } momentum_optimizer_value: 0.9 } } }
train_input_reader { tf_record_input_reader { input_path: "unused" } }
eval_input_reader { tf_record_input_reader { input_path: "unused" } }
"""

# (platform as jax.default_backend() names it, job) -> what use_bfloat16 computes in
EXPECTED = {
    ("tpu", "train"): "bf16", ("tpu", "eval"): "bf16",
    ("tpu", "predict"): "fp32", ("tpu", "export"): "fp32",
    ("gpu", "train"): "fp32", ("gpu", "eval"): "fp32", ("cuda", "train"): "fp32",
    ("rocm", "eval"): "fp32", ("gpu", "predict"): "fp32",
    ("cpu", "train"): "fp32", ("cpu", "eval"): "fp32", ("cpu", "export"): "fp32",
}


def _pipeline(tmp_path: Path, use_bfloat16: bool | None) -> Path:
    flag = "" if use_bfloat16 is None else f"use_bfloat16: {str(use_bfloat16).lower()}"
    path = tmp_path / "pipeline.config"
    path.write_text(PIPELINE % flag)
    return path


@pytest.mark.parametrize(("platform", "job"), sorted(EXPECTED))
def test_use_bfloat16_applies_when_training_or_evaluating_on_a_tpu(platform, job):
    assert job_precision("bf16_on_tpu", platform, job) == EXPECTED[platform, job]


@pytest.mark.parametrize("platform", ["cpu", "gpu", "tpu"])
@pytest.mark.parametrize("job", ["train", "eval", "predict", "export"])
@pytest.mark.parametrize("explicit", ["fp32", "bf16", "fp16"])
def test_an_explicit_precision_holds_on_every_platform(platform, job, explicit):
    assert job_precision(explicit, platform, job) == explicit


@pytest.mark.parametrize(("flag", "converted"), [(True, "bf16_on_tpu"), (False, "fp32"),
                                                 (None, "fp32")])
def test_the_converter_maps_use_bfloat16(tmp_path, flag, converted):
    assert load_pipeline_config(_pipeline(tmp_path, flag)).precision == converted


def test_unresolved_bf16_on_tpu_computes_in_float32():
    """predict, ``jaxdet.load`` and export build the model without a job's resolution."""
    assert compute_dtype("bf16_on_tpu") == jnp.float32
    assert compute_dtype("bf16") == jnp.bfloat16


def test_resolving_says_once_why_a_cpu_run_is_float32(tmp_path, caplog):
    config = load_pipeline_config(_pipeline(tmp_path, True))
    with caplog.at_level(logging.INFO, logger="jaxdet"):
        on_cpu = resolve_precision(config, "cpu", "train")
        on_tpu = resolve_precision(config, "tpu", "train")
        resolve_precision(config, "cpu", "predict")
    assert (on_cpu.precision, on_tpu.precision) == ("fp32", "bf16")
    said = [r.getMessage() for r in caplog.records if "TPUs only" in r.getMessage()]
    assert said == ["use_bfloat16 (precision: bf16_on_tpu) applies on TPUs only, as in TF: "
                    "this train runs in float32 on cpu; --set precision=bf16 computes in "
                    "bfloat16 here (or precision=fp16, float16 with loss scaling)"]


def test_a_user_set_precision_wins_over_use_bfloat16(tmp_path):
    config = load_pipeline_config(_pipeline(tmp_path, True), ["precision=bf16"])
    assert resolve_precision(config, "cpu", "train").precision == "bf16"
    config = load_pipeline_config(_pipeline(tmp_path, True), ["precision=fp32"])
    assert resolve_precision(config, "tpu", "train").precision == "fp32"


class Built(Exception):
    """Stops a job once its model is built."""


@pytest.mark.parametrize(("platform", "dtype"), [("tpu", jnp.bfloat16), ("gpu", jnp.float32),
                                                 ("cpu", jnp.float32)])
def test_the_train_job_builds_the_model_in_the_platforms_precision(tmp_path, monkeypatch,
                                                                    platform, dtype):
    """``runs.train`` resolves the precision by ``jax.default_backend()`` before it resolves
    the family and builds the task, and keeps the config as written (``bf16_on_tpu``) for the
    workdir."""
    config = load_pipeline_config(_pipeline(tmp_path, True))
    built = []

    def resolve(resolved):
        built.append(resolved)
        raise Built

    monkeypatch.setattr(runs.jax, "default_backend", lambda: platform)
    monkeypatch.setattr(runs.tasks, "resolve", resolve)
    monkeypatch.setattr(runs.placeholders, "check_data_paths", lambda *a, **k: None)
    with pytest.raises(Built):
        runs.train(config, tmp_path / "run")
    assert compute_dtype(built[0].precision) == dtype
    assert config.precision == "bf16_on_tpu"


@pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="needs ../shared/data/tfod/configs")
def test_every_zoo_config_with_use_bfloat16_is_float32_off_a_tpu():
    """The 40 TF2 zoo configs as shipped: those with ``use_bfloat16: true`` train in bf16 on a
    TPU only; none computes in bf16 on a CPU or GPU."""
    flagged = 0
    for path in sorted(TFOD_CONFIGS.glob("*.config")):
        text = path.read_text()
        config = load_pipeline_config(path, PLACEHOLDERS)
        uses = "use_bfloat16: true" in text
        flagged += uses
        assert config.precision == ("bf16_on_tpu" if uses else "fp32"), path.name
        for platform in ("cpu", "gpu"):
            assert job_precision(config.precision, platform, "train") == "fp32"
        assert job_precision(config.precision, "tpu", "train") == ("bf16" if uses else "fp32")
    assert flagged >= 20


def test_the_shipped_tf_ports_keep_tfs_choice():
    """The EfficientDet and RetinaNet ports carry TF's use_bfloat16 as TF applies it."""
    for name in ("efficientdet_d0", "efficientdet_d1", "retinanet_resnet50_fpn_640",
                 "faster_rcnn_resnet50_v1_640"):
        config = load_config(name)
        assert config.precision == "bf16_on_tpu", name
        assert compute_dtype(config.precision) == jnp.float32
