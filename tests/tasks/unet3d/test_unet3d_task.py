"""The 3D U-Net family on the task seam: a ``model.type: unet3d`` config builds a tiny
3-level U-Net (filters 4, 8, 16; 16^3 patches) whose parameters match the closed form, whose
train step (``train.build.build_train_step``) compiles once and learns generated volumes, and
whose predict and sliding-window segmentation agree jitted and eager."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from jaxdet import tasks
from jaxdet.config.loader import ConfigError, validate
from jaxdet.tasks.unet3d.model import unet3d_parameter_count
from jaxdet.tasks.unet3d.segmentation import dice_scores
from jaxdet.tasks.unet3d.volumes import GeneratedVolumes, generated_volume
from jaxdet.train import build as train_build
from jaxdet.train.accumulate import loss_and_grads
from jaxdet.train.step import init_train_state

PATCH = 16
RAW = {
    "name": "tiny_unet3d",
    "model": {"type": "unet3d", "num_classes": 3, "filters": [4, 8, 16],
              "patch_size": [PATCH, PATCH, PATCH]},
    "data": {"train": {"type": "generated_volumes", "shape": [PATCH, PATCH, PATCH]}},
    "train": {"batch_size": 2, "num_steps": 30, "optimizer": {"name": "adam"},
              "learning_rate": {"name": "constant", "learning_rate": 0.03}},
    "parallel": {"data": 1},
}


@pytest.fixture(scope="module")
def config():
    return validate(RAW)


@pytest.fixture(scope="module")
def task(config):
    return tasks.build_task(config)


def _batch(indices=(0, 1)) -> dict:
    source = GeneratedVolumes(num_volumes=4, shape=(PATCH,) * 3, seed=3)
    return {k: jnp.asarray(v) for k, v in source.batch(indices).items()}


def test_config_defaults_and_errors(config):
    m = config.model
    assert m.in_channels == 1 and m.negative_slope == 0.01 and m.norm == "instance_norm"
    assert (m.sliding_window.overlap, m.sliding_window.sigma_scale) == (0.5, 0.125)
    mlperf = validate({**RAW, "model": {"type": "unet3d", "num_classes": 3}}).model
    assert mlperf.filters == (32, 64, 128, 256, 320, 320)
    assert mlperf.patch_size == (128, 128, 128)
    with pytest.raises(ConfigError, match="instance_norm"):
        validate({**RAW, "model": {**RAW["model"], "norm": "batch_norm"}})
    with pytest.raises(ConfigError, match="multiple of 4"):
        validate({**RAW, "model": {**RAW["model"], "patch_size": [16, 16, 18]}})


@pytest.mark.slow
def test_parameter_count_by_hand(task, config):
    params, batch_stats = task.initial_variables()
    count = sum(int(np.size(v)) for v in jax.tree.leaves(params))
    # block(cin, cout) = 27 cin cout + 2 cout; up(cin, cout) = 8 cin cout + cout
    #   input 1->4->4: 116 + 440                       = 556
    #   level 1 4->8->8: 880 + 1744                    = 2624
    #   level 2 8->16->16: 3488 + 6944                 = 10432
    #   up 16->8: 1032 + block(16, 8) 3472 + 1744      = 6248
    #   up 8->4: 260 + block(8, 4) 872 + 440           = 1572
    #   output 1x1x1 4->3 with bias: 15
    assert count == 556 + 2624 + 10432 + 6248 + 1572 + 15 == 21447
    assert unet3d_parameter_count(1, 3, (4, 8, 16)) == 21447
    assert batch_stats == {}
    assert task.max_stride() == 4
    layout = task.batch_layout()
    assert layout["images"].shape == (PATCH, PATCH, PATCH, 1)
    assert layout["labels"].shape == (PATCH, PATCH, PATCH)
    summary = tasks.family(config).summary(config)
    assert summary["parameters"]["total"] == 21447
    assert summary["multiply_adds"]["total"] > 0
    assert "21,447" in tasks.family(config).format_summary(summary)
    assert tasks.fingerprint_fields(config)["model"] == {
        "type": "unet3d", "num_classes": 3, "in_channels": 1, "filters": [4, 8, 16],
        "norm": "instance_norm"}


def test_mlperf_parameter_count_formula():
    """The MLPerf network's size from the closed form (1 input channel, 3 classes), summed
    by hand level by level (encoder + decoder of each level, input block, output conv)."""
    levels = [166144 + 99488, 664064 + 397632, 2655232 + 1589888, 4977920 + 5965056,
              5530880 + 9115200]
    assert unet3d_parameter_count(1, 3, (32, 64, 128, 256, 320, 320)) == (
        28640 + sum(levels) + 99) == 31190243


def test_generated_volumes_are_deterministic():
    a_img, a_lab = generated_volume((3, 1), (12, 10, 8))
    b_img, b_lab = generated_volume((3, 1), (12, 10, 8))
    np.testing.assert_array_equal(a_img, b_img)
    np.testing.assert_array_equal(a_lab, b_lab)
    assert a_img.shape == (12, 10, 8, 1) and a_img.dtype == np.float32
    assert a_lab.dtype == np.int32 and set(np.unique(a_lab)) <= {0, 1, 2}
    labels = np.stack([GeneratedVolumes(16, (16, 16, 16))[i][1] for i in range(16)])
    assert {1, 2} <= set(np.unique(labels))


@pytest.mark.slow
def test_train_step_compiles_once_and_learns(config):
    task = tasks.build_task(config)  # its own: the step donates the model's initial arrays
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    step = train_build.build_train_step(config, task, tx, schedule)
    batch = _batch()
    losses, dice = [], []
    for _ in range(30):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
        dice.append(float(metrics["dice_loss"]))
    assert step._cache_size() == 1
    assert set(metrics) >= {"loss", "dice_loss", "ce_loss", "grad_norm"}
    assert np.isfinite(losses).all()
    # 2.04 -> about 0.72 (cross-entropy 1.14 -> 0.16, Dice loss 0.90 -> 0.55)
    assert np.mean(losses[-5:]) < 0.5 * losses[0], losses
    assert np.mean(dice[-5:]) < 0.8 * dice[0], dice


@pytest.mark.slow
def test_accumulated_loss_and_grads_equal_the_whole_batch(task):
    params, stats = task.initial_variables()
    batch = _batch((0, 1, 2, 3))
    key = jax.random.key(0)
    loss1, parts1, _, g1 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key))(params)
    loss2, parts2, _, g2 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key,
                                                           accumulate_steps=2))(params)
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    np.testing.assert_allclose(parts2["dice_loss"], parts1["dice_loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(np.abs(b).max()) + 1e-7)


@pytest.mark.slow
def test_predict_jitted_equals_eager(task):
    params, stats = task.initial_variables()
    images = _batch()["images"]
    eager = task.predict(params, stats, images)
    jitted = jax.jit(task.predict)(params, stats, images)
    assert eager["probabilities"].shape == (2, PATCH, PATCH, PATCH, 3)
    assert eager["labels"].shape == (2, PATCH, PATCH, PATCH)
    np.testing.assert_allclose(jitted["probabilities"], eager["probabilities"], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.sum(eager["probabilities"], -1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_segment_volume_covers_a_larger_volume(task):
    params, stats = task.initial_variables()
    image, _ = generated_volume(7, (24, 16, 20))
    probs = jax.jit(lambda v: task.segment_volume(params, stats, v, batch_size=2))(image)
    assert probs.shape == (24, 16, 20, 3)
    np.testing.assert_allclose(np.sum(probs, -1), 1.0, rtol=1e-5)
    # a volume exactly one patch: the blend is the patch's own softmax
    patch = jnp.asarray(image[:PATCH, :PATCH, :PATCH])
    one = jax.jit(lambda v: task.segment_volume(params, stats, v))(patch)
    own = jax.jit(task.predict)(params, stats, patch[None])["probabilities"][0]
    np.testing.assert_allclose(one, own, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_evaluate_scores_whole_volumes_with_per_class_dice(tmp_path):
    """evaluate = the mean over cases of dice_scores of segment_volume's argmax (computed
    here directly), and a perfect segmentation scores 1.0 in every class."""
    task = tasks.build_task(validate(RAW))
    params, stats = task.initial_variables()
    source = GeneratedVolumes(num_volumes=2, shape=(24, 16, 20), seed=5)
    logged = []
    metrics = task.evaluate(None, params, stats, source, out_dir=tmp_path,
                            num_visualizations=1, on_images=logged.append)
    # the samples picture, as TensorBoard gets it: the pixels of samples.png
    samples = np.asarray(Image.open(tmp_path / "samples.png").convert("RGB"))
    assert [list(d) for d in logged] == [["eval_samples"]]
    np.testing.assert_array_equal(logged[0]["eval_samples"], samples)
    cases = []
    for image, label in (source[0], source[1]):
        pred = jnp.argmax(task.segment_volume(params, stats, jnp.asarray(image)), -1)
        cases.append(np.asarray(dice_scores(pred[None], jnp.asarray(label)[None], 3))[0])
    cases = np.stack(cases)
    assert metrics["num_cases"] == 2
    np.testing.assert_allclose([metrics["dice/class_1"], metrics["dice/class_2"]],
                               cases.mean(0), rtol=1e-6)
    assert [c["name"] for c in metrics["per_case"]] == ["volume_0", "volume_1"]
    np.testing.assert_allclose(list(metrics["per_case"][1]["dice"].values()), cases[1],
                               rtol=1e-6)
    np.testing.assert_allclose(metrics["mean_dice"], cases.mean(1).mean(), rtol=1e-6)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics

    # a segmenter that reads the class off the image: every class right in every case
    def oracle(params, stats, volume):
        return jax.nn.one_hot(jnp.round(volume[..., 0]).astype(jnp.int32), 3)

    task.segment_volume = oracle
    labelled = [(label[..., None].astype(np.float32), label)
                for label in (source[0][1], source[1][1])]
    perfect = task.evaluate(None, params, stats, labelled)
    assert perfect["mean_dice"] == perfect["dice/class_1"] == perfect["dice/class_2"] == 1.0


def test_every_class_puts_a_sphere_and_a_cube_in_every_volume():
    source = GeneratedVolumes(12, (24, 24, 24), seed=4, max_objects=3, every_class=True)
    for i in range(12):
        assert {1, 2} <= set(np.unique(source[i][1])), i
    with pytest.raises(ValueError, match="max_objects >= 2"):
        generated_volume(0, (8, 8, 8), max_objects=1, every_class=True)
