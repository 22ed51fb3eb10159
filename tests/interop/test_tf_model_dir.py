"""A TF OD API run continued by jaxdet: the model_dir TF's ``model_main_tf2.py`` left at step 2
(the suite's small MobileNetV2-FPN SSD, momentum optimizer, cosine schedule;
fixtures/make_tf_model_dir_fixture.py) becomes a jaxdet checkpoint at step 2 (weights,
momentum slots, step), and jaxdet's next steps on TF's batch give the losses TF's own next
steps recorded: the schedule goes on from TF's step, and the velocity TF carried moves the
weights as in TF (from step 3 the cosine rate is 0, so only the carried velocity moves them).

The band. The first step's losses are TF's to 7 digits (the checkpoint's weights on TF's
batch). The later ones move with float32 rounding: the fixture's seeded weights give losses
of 8-30 and steep gradients, and jaxdet against itself with its input scaled by 1 +- 1e-6 and
1 + 3e-6 spreads 0.3% at step 4, 0.6% at step 5 and 0.8% at step 6, with TF's values inside
the spread; the later steps are compared within 1.5%. (The fixture's config sets
``add_background_class: false``: with TF's default a sigmoid SSD also trains a background logit
that jaxdet leaves out, a difference of its own, 30% of these seeded losses.)"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax
import numpy as np
import optax
import pytest

from jaxdet import tasks
from jaxdet.cli.main import main
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.interop.tf_import import slot_key
from jaxdet.interop.tfod_names import tf_unapplied
from jaxdet.jobs import runs, tf_run
from jaxdet.tasks.weights import load_weights, tf_variables
from jaxdet.train import build as train_build
from jaxdet.train.optim import param_path
from jaxdet.train.step import abstract_train_state
from tf_train_start import fixture_batch

FIXTURE = Path(__file__).parent / "fixtures" / "tf_model_dir"
sys.path.insert(0, str(FIXTURE.parent))
from tf_fixture_values import rebuild_data  # noqa: E402

pytestmark = [pytest.mark.slow]
UNUSED = ["data.train.input_path=unused", "data.train.label_map_path=null",
          "data.eval.input_path=unused", "data.eval.label_map_path=null", "parallel.data=1"]


def _model_dir(tmp_path: Path) -> Path:
    model_dir = tmp_path / "model_dir"
    rebuild_data(FIXTURE, model_dir / "ckpt-1", "ckpt-1.index")
    shutil.copy(FIXTURE / "checkpoint", model_dir / "checkpoint")
    return model_dir


def test_a_tf_model_dir_continues_as_tf_continues_it(tmp_path):
    tf = json.loads((FIXTURE / "continue.json").read_text())
    config = load_pipeline_config(FIXTURE / "pipeline.config",
                                  [*UNUSED, "train.init_checkpoint=null", "train.num_steps=6"])
    model_dir = _model_dir(tmp_path)
    assert tf_run.holds_tf_run(model_dir)
    continued = tf_run.continue_tf_run(config, model_dir)
    assert (continued.step, continued.slots) == (tf["start_step"], {"momentum": 186})
    assert not continued.report.unused and not continued.report.reinitialized
    assert continued.line().startswith(f"continuing the TF OD API run of {model_dir}/ckpt-1 "
                                       "at step 2:")

    family = tasks.resolve(config)
    task = family.build_task()
    tx, rate = train_build.build_optimizer(config.train)
    checkpointer = runs.open_checkpoints(config, model_dir)
    try:
        assert checkpointer.all_steps() == [2]
        state, _ = checkpointer.restore(2, abstract_train_state(task, tx, ema=False))
    finally:
        checkpointer.close()
    assert int(state["step"]) == 2
    # one velocity read back: TF's slot of the first box-tower kernel, as jaxdet holds it
    ckpt = TfCheckpoint(model_dir / "ckpt-1")
    names = tasks.tf_name_map(task.model, config)
    tf_path = next(p for p in names if p.endswith("BoxPredictionTower/0/kernel"))
    ours, _ = names[tf_path]
    is_trace = lambda s: isinstance(s, optax.TraceState)  # noqa: E731
    trace = next(s for s in jax.tree.leaves(state["opt_state"], is_leaf=is_trace)
                 if is_trace(s)).trace
    for key in ours:
        trace = trace[key]
    np.testing.assert_array_equal(
        np.asarray(trace), ckpt.read(slot_key(ckpt.variables()[tf_path], "momentum")))

    step = train_build.build_train_step(config, task, tx, rate, normalizer=family.normalizer())
    batch = fixture_batch(task, tf)
    for k, row in enumerate(tf["steps"]):
        state, metrics = step(state, batch)
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        assert metrics["learning_rate"] == pytest.approx(row["learning_rate"], abs=1e-7)
        if k == 0:  # the weight decay's loss, as TF's regularizers sum it
            assert metrics["regularization_loss"] == pytest.approx(row["regularization_loss"],
                                                                   rel=1e-5)
        for key in ("classification_loss", "localization_loss"):
            # the first step is TF's checkpoint itself; after it, float32 noise (see above)
            assert metrics[key] == pytest.approx(row[key], rel=1e-5 if k == 0 else 1.5e-2), (
                row["step"], key, metrics[key], row[key])
    assert int(state["step"]) == tf["steps"][-1]["step"]


def test_a_tf_run_with_adam_and_moving_averages_continues_as_tf_continues_it(tmp_path):
    """The same model trained by Adam with TF2's moving average of the weights
    (``use_moving_average``: the averages are slots of TF's ``ExponentialMovingAverage``
    optimizer, Adam's own slots those of its ``ema_base_optimizer``), saved at step 20: the
    continued run reads Adam's ``m`` and ``v`` and the averages, its next four steps give TF's
    losses (the first to float32 rounding, the later within the band above), and its moving
    averages after them are TF's: the class predictor's bias to 1e-6, every average's norm
    within 0.2% (the weights they follow carry the steps' float32 noise). TF2's average
    counts the update it makes, (2 + t) / (11 + t) capping update t's decay: the converted
    config's ``ema_dynamic_decay_offset: 1``. Over 20 s cold (a compiled Adam step of the
    small SSD): the one check of a run under TF's averaging optimizer, both ways."""
    fixture = FIXTURE.parent / "tf_model_dir_adam_ema"
    tf = json.loads((fixture / "continue.json").read_text())
    config = load_pipeline_config(fixture / "pipeline.config",
                                  [*UNUSED, "train.init_checkpoint=null", "train.num_steps=30"])
    assert config.train.optimizer.name == "adam" and config.train.ema_decay == 0.9
    model_dir = tmp_path / "model_dir"
    rebuild_data(fixture, model_dir / "ckpt-1", "ckpt-1.index")
    shutil.copy(fixture / "checkpoint", model_dir / "checkpoint")
    continued = tf_run.continue_tf_run(config, model_dir)
    assert (continued.step, continued.slots) == (20, {"m": 186, "v": 186, "average": 186})

    family = tasks.resolve(config)
    task = family.build_task()
    tx, rate = train_build.build_optimizer(config.train)
    checkpointer = runs.open_checkpoints(config, model_dir)
    try:
        state, _ = checkpointer.restore(20, abstract_train_state(task, tx, ema=True))
    finally:
        checkpointer.close()
    step = train_build.build_train_step(config, task, tx, rate, normalizer=family.normalizer())
    batch = fixture_batch(task, tf)
    for k, row in enumerate(tf["steps"]):
        state, metrics = step(state, batch)
        metrics = jax.device_get(metrics)
        for key in ("classification_loss", "localization_loss"):
            assert float(metrics[key]) == pytest.approx(row[key], rel=1e-5 if k == 0 else 1.5e-2)
    names = tasks.tf_name_map(task.model, config)
    averages = {param_path(k): np.asarray(v) for k, v in
                jax.tree_util.tree_flatten_with_path(jax.device_get(state["ema_params"]))[0]}
    assert set(tf["averages"]) <= set(names)
    for tf_path, want in tf["averages"].items():
        ours = averages["/".join(map(str, names[tf_path][0]))]
        assert float(np.linalg.norm(ours)) == pytest.approx(want["norm"], rel=2e-3), tf_path
    (tf_path, want), = tf["average_values"].items()
    np.testing.assert_allclose(averages["/".join(map(str, names[tf_path][0]))].reshape(-1),
                               want, atol=1e-6)
    # and back: TF's checkpoint again, Adam's slots under the averaging optimizer's base
    written = tf_run.write_tf_run(config, model_dir, tmp_path / "back")
    assert (written.step, written.slots) == (20, 3 * 186)
    _assert_same_tensors(TfCheckpoint(model_dir / "ckpt-1"), TfCheckpoint(tmp_path / "back"))


def test_a_jaxdet_run_goes_back_to_a_tf_model_dir(tmp_path):
    """The way back: a jaxdet run written as a TF model_dir (``ckpt-1`` + ``checkpoint``)
    holds, for every tensor of TF's own checkpoint of that model, the same bytes under the
    same key, and the step: here the run continued from TF's model_dir, so what it writes
    back must be TF's checkpoint again. (TF restoring such a file into its own model, every
    object matched, is checked with TF itself: benchmarks/accuracy/tf_way_back.py and
    benchmarks/peers/tf_restore_check.py.)"""
    config = load_pipeline_config(FIXTURE / "pipeline.config",
                                  [*UNUSED, "train.init_checkpoint=null"])
    model_dir = _model_dir(tmp_path)
    tf_run.continue_tf_run(config, model_dir)
    written = tf_run.write_tf_run(config, model_dir, tmp_path / "back")
    assert (written.step, written.tensors, written.slots) == (2, 306, 186)
    assert (tmp_path / "back" / "checkpoint").read_text().startswith(
        'model_checkpoint_path: "ckpt-1"')
    theirs, ours = TfCheckpoint(model_dir / "ckpt-1"), TfCheckpoint(tmp_path / "back")
    paths = ours.variables()
    assert set(paths) == {*tasks.tf_name_map(tasks.build_task(config).model, config),
                          "step", "save_counter", "optimizer/iter", "optimizer/momentum",
                          "optimizer/decay"}
    for path, key in paths.items():
        if path == "save_counter":
            continue
        assert key == theirs.variables()[path]  # TF's own key
        np.testing.assert_array_equal(ours.read(key), theirs.read(key), err_msg=path)
    _assert_same_tensors(theirs, ours)  # the momentum slots too
    with pytest.raises(ValueError, match="already holds TF checkpoints"):
        tf_run.write_tf_run(config, model_dir, tmp_path / "back")
    # the command: the same files
    assert main(["export", "--format", "tf_checkpoint", "--workdir", str(model_dir),
                 "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "ckpt-1.index").read_bytes() == (
        tmp_path / "back" / "ckpt-1.index").read_bytes()


def _assert_same_tensors(theirs: TfCheckpoint, ours: TfCheckpoint) -> None:
    """Every tensor of TF's checkpoint, the optimizer's slots and iteration count among them,
    is in ``ours`` under TF's key with TF's bytes. (TF restoring such a file and training on
    from it to the losses of its own continuation is checked with TF itself:
    fixtures/check_way_back_slots.py.)"""
    keys = set(theirs.keys()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert keys <= set(ours.keys()), sorted(keys - set(ours.keys()))[:5]
    for key in keys:
        np.testing.assert_array_equal(ours.read(key), theirs.read(key), err_msg=key)


def test_the_way_back_restores_tfs_background_logit(tmp_path):
    """The zoo's MobileNetV2 SSD keeps TF's default ``add_background_class`` with a sigmoid:
    TF's class predictor has a background logit per anchor that jaxdet's drops. Written back,
    every tensor has TF's shape, the background logits are zeros (TF drops that column from
    its scores) and everything else is TF's checkpoint again."""
    zoo = FIXTURE.parent / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8"
    config = load_pipeline_config(zoo / "pipeline.config", UNUSED)
    assert config.model.tf_background_logit and not config.model.add_background_class
    task = tasks.build_task(config)
    theirs = TfCheckpoint(rebuild_data(zoo, tmp_path / "ckpt-0"))

    load_weights(task.model, config, theirs.prefix, format="tf")
    assert _compare_written(task, config, theirs) == 12  # 6 class predictors: kernel, bias


def _compare_written(task, config, theirs: TfCheckpoint) -> int:
    """Check ``task.model`` written in TF's layout against TF's checkpoint ``theirs``: every
    tensor TF's shape, TF's values, but a background logit TF keeps (``1 + C`` logits per
    anchor), which is written as zeros, and the variables TF holds but never applies (an
    EfficientNet's classifier top), written as placeholders of TF's shape. Returns how many
    tensors had a background logit."""
    keys = theirs.variables()
    slots = config.model.num_classes + 1
    background = 0
    written = tf_variables(task.model, config)
    assert written
    unapplied = tf_unapplied(task.model)
    assert {p for p in written if unapplied(p)} == {
        p for p in keys if unapplied(p) and not p.startswith("model/_self_supervised_rng")}
    for path, ours in written.items():
        tf_value = theirs.read(keys[path])
        assert ours.shape == tf_value.shape, path
        if unapplied(path):
            continue
        if getattr(config.model, "tf_background_logit", False) and (
                "_class_predictor_layers" in path):
            grouped, tf_grouped = ours.reshape(-1, slots), tf_value.reshape(-1, slots)
            assert not grouped[:, 0].any()
            np.testing.assert_array_equal(grouped[:, 1:], tf_grouped[:, 1:])
            background += 1
        else:
            np.testing.assert_array_equal(ours, tf_value, err_msg=path)
    return background


ARCHITECTURES = ["tf_ssd_resnet50_v1_fpn_640x640_coco17_tpu-8",
                 "tf_ssd_efficientdet_d0_512x512_coco17_tpu-8",
                 pytest.param("tf_faster_rcnn_resnet50_v1_fpn_640x640_coco17_tpu-8",
                              marks=pytest.mark.exhaustive),
                 "tf_faster_rcnn_resnet50_v1_640x640_coco17_tpu-8",
                 pytest.param("tf_mask_rcnn_resnet50_v1_640x640", marks=pytest.mark.exhaustive),
                 pytest.param("tf_centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8",
                              marks=pytest.mark.exhaustive),
                 pytest.param("tf_deepmac_resnet50_v1_fpn_512x512",
                              marks=pytest.mark.exhaustive)]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_way_back_gives_tfs_tensors_for_each_architecture(name, tmp_path):
    """Each TF detector fixture read into jaxdet and written back gives TF's own checkpoint:
    every tensor TF's name map covers, TF's shape and TF's values (RetinaNet, EfficientDet-D0:
    its BiFPN fusion weights TF's ``[k, 1]`` columns again, its classifier top that TF keeps
    but never applies written in TF's shapes, and Faster R-CNN C4 here; FPN
    Faster R-CNN, Mask R-CNN, CenterNet with keypoints and DeepMAC with ``-m exhaustive``)."""
    fixture = FIXTURE.parent / name
    config = load_pipeline_config(fixture / "pipeline.config", UNUSED)
    task = tasks.build_task(config)
    theirs = TfCheckpoint(rebuild_data(fixture, tmp_path / "ckpt-0"))
    load_weights(task.model, config, theirs.prefix, format="tf")
    assert _compare_written(task, config, theirs) == (
        2 if getattr(config.model, "tf_background_logit", False) else 0)


def test_efficientdet_d1_writes_tfs_unapplied_last_block_and_classifier_top(tmp_path):
    """B1's last stage has two blocks; jaxdet builds the first (level 5's endpoint), TF's
    Keras EfficientNet holds both and its classifier top: written back, the second block, the
    top conv and batch norm and the logits are there under TF's numbering, in TF's shapes
    (26 tensors, D0 has 7: its last stage is one block)."""
    fixture = FIXTURE.parent / "tf_names" / "tf_ssd_efficientdet_d1_640x640_coco17_tpu-8"
    config = load_pipeline_config(fixture / "pipeline.config", UNUSED)
    task = tasks.build_task(config)
    theirs = TfCheckpoint(rebuild_data(fixture, tmp_path / "ckpt-0"))
    keys, unapplied = theirs.variables(), tf_unapplied(task.model)
    written = {p: v for p, v in tf_variables(task.model, config).items() if unapplied(p)}
    assert len(written) == 26
    assert set(written) == {p for p in keys if unapplied(p)}
    for path, ours in written.items():
        assert ours.shape == theirs.shape(keys[path]), path
