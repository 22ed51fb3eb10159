"""Starting from other weights: TF OD API checkpoints restored in full, their feature extractor
alone (TF2's ``detection``), all that fits another class count, or the backbone alone (from a
TF2 classification checkpoint written by TensorFlow, or a detection one); jaxdet workdirs the
same way; clear errors for another architecture, a class count that does not fit, and the zoo's
placeholder path."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.formats import detect_format
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.tfod_names import UnmappedModelError
from jaxdet.jobs import runs
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.weights import load_weights, tf_variable_names
from jaxdet.train import optim

FIXTURES = Path(__file__).parents[1] / "interop" / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

MOBILENET = FIXTURES / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"
FPNLITE = FIXTURES / "tf_ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8"
SETS = ["data.train.input_path=unused", "data.eval.input_path=unused"]

pytestmark = pytest.mark.xdist_group("tf_detectors")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    return {"detection": rebuild_data(MOBILENET, root / "det" / "ckpt-0"),
            "classification": rebuild_data(MOBILENET / "classification", root / "cls" / "ckpt-0")}


def _model(overrides=()):
    config = load_pipeline_config(MOBILENET / "pipeline.config", [*SETS, *overrides])
    return config, ssd_build.build_model(config, seed=0)


def _flat(module) -> dict[str, np.ndarray]:
    state = nnx.state(module, (nnx.Param, nnx.BatchStat))
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(state)}


@pytest.fixture(scope="module")
def full(checkpoints):
    config, model = _model()
    load_weights(model, config, checkpoints["detection"], restore="full")
    return _flat(model)


def test_format_is_recognised(checkpoints, tmp_path):
    assert detect_format(checkpoints["detection"]) == "tf"
    assert detect_format(checkpoints["detection"].parent) == "tf"  # its folder
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    assert detect_format(tmp_path / "run") == "jaxdet"
    with pytest.raises(FileNotFoundError, match="neither a jaxdet workdir"):
        detect_format(tmp_path / "nothing")


@pytest.mark.parametrize("source", ["classification", "detection"])
def test_classification_restores_the_backbone_alone(checkpoints, full, source):
    config, model = _model()
    fresh = _flat(model)
    report = load_weights(model, config, checkpoints[source], restore="classification")
    got = _flat(model)
    backbone = [k for k in got if k.startswith("backbone/")]
    assert len(report.restored) == len(backbone) == 260
    assert report.unused == [] and report.reinitialized == []
    for k, v in got.items():
        np.testing.assert_array_equal(v, full[k] if k.startswith("backbone/") else fresh[k],
                                      err_msg=k)


def test_fitting_for_another_class_count_reinitialises_the_class_predictor(checkpoints, full):
    config, model = _model(["model.num_classes=3"])
    fresh = _flat(model)
    report = load_weights(model, config, checkpoints["detection"], restore="fitting")
    assert sorted(report.reinitialized) == sorted(
        f"head/predictors/{level}/class_predictor/conv/{leaf}"
        for level in range(6) for leaf in ("kernel", "bias"))
    assert len(report.restored) == 324 - 12 and report.unused == []
    got = _flat(model)
    for k, v in got.items():
        expected = fresh[k] if "class_predictor" in k else full[k]
        np.testing.assert_array_equal(v, expected, err_msg=k)


def test_detection_restores_the_feature_extractor_as_tf_does(checkpoints, full):
    """TF2's ``fine_tune_checkpoint_type: detection`` (``restore_from_objects``): backbone and
    FPN from the checkpoint; the box predictor, class and box heads alike, keeps its
    initialization (the tensors of another class count are never read); its tensors in the
    checkpoint are not reported unused."""
    config, model = _model(["model.num_classes=3"])
    fresh = _flat(model)
    report = load_weights(model, config, checkpoints["detection"], restore="detection")
    got = _flat(model)
    head = {k for k in got if k.startswith("head/")}
    assert len(head) == 24 and set(report.reinitialized) == head
    assert len(report.restored) == 300 and report.unused == []
    assert report.line().endswith("restored 300 tensors, 24 re-initialised, 0 unused in the "
                                  "checkpoint")
    for k, v in got.items():
        np.testing.assert_array_equal(v, fresh[k] if k in head else full[k], err_msg=k)


def test_full_refuses_a_class_count_that_does_not_fit(checkpoints):
    config, model = _model(["model.num_classes=3"])
    before = _flat(model)
    with pytest.raises(CheckpointError) as info:
        load_weights(model, config, checkpoints["detection"], restore="full")
    message = str(info.value)
    assert "12 tensors do not fit this model" in message and "class_predictor" in message
    assert all(np.array_equal(v, before[k]) for k, v in _flat(model).items())  # untouched


def test_another_architecture_names_the_missing_tensors(checkpoints):
    config = load_pipeline_config(FPNLITE / "pipeline.config", SETS)
    model = ssd_build.build_model(config, seed=0)
    with pytest.raises(CheckpointError) as info:
        load_weights(model, config, checkpoints["detection"], restore="full")
    message = str(info.value)
    assert "is not a checkpoint of this model" in message
    assert "tensors are missing, e.g. model/_feature_extractor/" in message
    assert "closest in the checkpoint" in message


def test_a_model_without_tf_names_says_which_part(checkpoints):
    """shapes_demo's ResNet-18 (basic blocks) has no TF OD API counterpart to take names from:
    the error names it before any tensor is read."""
    config = load_config("shapes_demo", ["precision=fp32"])
    model = abstract_build(lambda: ssd_build.build_model(config))
    with pytest.raises(UnmappedModelError, match="TF OD API ResNets are bottleneck ResNets"):
        load_weights(model, config, checkpoints["detection"])


def test_zoo_placeholder_is_refused_before_any_work(tmp_path):
    config = load_pipeline_config(MOBILENET / "pipeline.config", [
        *SETS, "data.train.label_map_path=unused", "data.eval.label_map_path=unused"])
    assert config.train.init_checkpoint.path.startswith("PATH_TO_BE_CONFIGURED")
    assert config.train.init_checkpoint.restore == "classification"
    with pytest.raises(ConfigError) as info:
        runs.train(config, tmp_path / "w", progress=False)
    assert "train.init_checkpoint.path is still the TF OD API placeholder" in str(info.value)
    assert "train_config.fine_tune_checkpoint" in str(info.value)
    assert not (tmp_path / "w").exists()


def test_training_starts_from_a_workdir_for_another_class_count(tiny_overrides, tmp_path,
                                                                 caplog):
    """shapes_demo trained on 3 classes, then a 4-class run initialised from it: one line
    says what was restored; the new run's first state is the old run's, except the class
    predictor."""
    first = load_config("shapes_demo", tiny_overrides)
    runs.train(first, tmp_path / "first", progress=False, evaluate=False)
    second = load_config("shapes_demo", [
        *tiny_overrides, "model.num_classes=4", "data.train.num_classes=4",
        "data.eval.num_classes=4", "train.num_steps=1", "data.train.output_dir=data/train4",
        f"train.init_checkpoint={{path: {tmp_path / 'first'}, restore: fitting}}"])
    with caplog.at_level(logging.INFO, logger="jaxdet"):
        runs.train(second, tmp_path / "second", progress=False, evaluate=False)
    assert "restored" in caplog.text and "2 re-initialised, 0 unused" in caplog.text

    task = tasks.build_task(second)
    # detection, as TF2 (a model without TF names too): backbone and neck, the head fresh
    fresh = tasks.build_task(second).model
    report = load_weights(fresh, second, tmp_path / "first", restore="detection")
    assert report.reinitialized == sorted(k for k in _flat(fresh) if k.startswith("head/"))
    assert report.restored and report.unused == []
    assert all(k.startswith(("backbone/", "neck/")) for k in report.restored)
    report = load_weights(task.model, second, tmp_path / "first", restore="fitting")
    assert sorted(report.reinitialized) == ["head/class_predictor/bias",
                                            "head/class_predictor/kernel"]
    trained = runs.restore_for_inference(first, tmp_path / "first")[1]
    got = _flat(task.model)
    want = jax.tree_util.tree_flatten_with_path(trained["params"])[0]
    for path, value in want:
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        if "class_predictor" not in name:
            np.testing.assert_array_equal(got[name], np.asarray(value), err_msg=name)


def _mask(config, model, names):
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    mask = optim.trainable_mask(params, config.train.freeze_variables,
                                config.train.update_trainable_variables, names)
    return {optim.param_path(p) for p, trained in
            jax.tree_util.tree_flatten_with_path(mask)[0] if trained}


def test_freeze_regexes_may_be_written_against_tensorflow_variable_names(checkpoints):
    """A TF checkpoint's object graph records each variable's TF name (its ``var.name``; those
    below are what TF 2.21 named this model's variables); ``freeze_variables`` /
    ``update_trainable_variables`` regexes match them, or the object paths, or jaxdet's paths."""
    config, model = _model([
        r"train.update_trainable_variables=['^BoxPredictor/ConvolutionalClassHead_\d/']",
        "train.freeze_variables=['ClassHead_5', '^head/predictors/4/']"])
    names = tf_variable_names(model, config, checkpoints["detection"])
    assert len(names) == 324
    assert names["backbone/conv_stem/kernel"] == [
        "Conv1/kernel", "model/_feature_extractor/classification_backbone/layer_with_weights-0/"
        "kernel"]
    assert names["backbone/bn1/scale"][0] == "bn_Conv1/gamma"
    assert names["neck/extra/0/reduce/norm/bias"][0] == (
        "ssd_mobile_net_v2_keras_feature_extractor/FeatureMaps/"
        "layer_19_1_Conv2d_2_1x1_256_batchnorm/beta")
    assert names["head/predictors/0/box_predictor/conv/bias"][0] == (
        "BoxPredictor/ConvolutionalBoxHead_0/BoxEncodingPredictor/bias")
    trained = _mask(config, model, names)
    assert trained == {f"head/predictors/{level}/class_predictor/conv/{leaf}"
                       for level in range(4) for leaf in ("kernel", "bias")}
    # the object path works too; the backbone alone from a classification checkpoint
    config, model = _model(["train.freeze_variables=['^model/_feature_extractor/']"])
    trained = _mask(config, model, tf_variable_names(model, config, checkpoints["detection"]))
    assert trained and all(p.startswith("head/") for p in trained)
    cls = tf_variable_names(model, config, checkpoints["classification"],
                            restore="classification")
    assert len(cls) == 260 and all(k.startswith("backbone/") for k in cls)
    assert cls["backbone/conv_stem/kernel"][0] == "Conv1/kernel"


def test_fine_tuning_trains_what_the_tf_names_select_and_resumes_without_the_checkpoint(
        checkpoints, tmp_path):
    """A zoo config fine-tuned from its TF checkpoint with ``update_trainable_variables``
    written as a TF user writes it: after two steps only the class predictors moved; the TF
    names are kept in the workdir, so the run resumes after the checkpoint is gone."""
    source = tmp_path / "tf" / "ckpt-0"
    source.parent.mkdir()
    for f in checkpoints["detection"].parent.glob("ckpt-0*"):
        (source.parent / f.name).write_bytes(f.read_bytes())
    config = load_pipeline_config(MOBILENET / "pipeline.config", [
        "precision=fp32", "model.num_classes=3", "data.resizer.height=64",
        "data.resizer.width=64", "data.eval=null", "train.batch_size=2", "train.num_steps=2",
        "train.ema_decay=null", "train.checkpoint_every=1", "parallel.data=1",
        "data.train={type: shapes, output_dir: data/train, num_images: 4, "
        "image_size: [64, 64], num_classes: 3}",
        f"train.init_checkpoint={{path: {source}, restore: detection}}",
        r"train.update_trainable_variables=['^BoxPredictor/ConvolutionalClassHead_\d/']"])
    workdir = tmp_path / "run"
    runs.train(config, workdir, progress=False, evaluate=False)
    assert (workdir / runs.VARIABLE_NAMES_FILE).is_file()
    _, state, step = runs.restore_for_inference(config, workdir)
    assert step == 2
    reference = tasks.build_task(config).model  # the run's own initialization
    load_weights(reference, config, source, restore="detection")
    before = _flat(reference)
    moved = set()
    for path, value in jax.tree_util.tree_flatten_with_path(state["params"])[0]:
        name = optim.param_path(path)
        if not np.array_equal(np.asarray(value), before[name]):
            moved.add(name)
    selected = {f"head/predictors/{level}/class_predictor/conv/{leaf}"
                for level in range(6) for leaf in ("kernel", "bias")}
    assert moved <= selected and len(moved) >= 10  # (a 1x1 level's bias may not move)
    for f in source.parent.iterdir():
        f.unlink()
    longer = config.model_copy(update={"train": config.train.model_copy(
        update={"num_steps": 3})})
    assert runs.train(longer, workdir, progress=False, evaluate=False).step == 3
