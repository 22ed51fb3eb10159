"""The Cloud TPU reference's 3D U-Net (``model.architecture: tpu_reference``): its parameter
count by hand (a tiny 2-level version and the full 128^3 reference), the adaptive Dice loss on a
hand-computed example, a tiny train step that compiles once, learns generated volumes and moves
the BatchNorm statistics that eval mode then uses, jitted = eager predict, the two convolution
lowerings, and the config errors."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import ConfigError, validate
from jaxdet.tasks.unet3d.segmentation import adaptive_dice_loss
from jaxdet.tasks.unet3d.tpu_reference import TPUReferenceUNet3D, tpu_reference_parameter_count
from jaxdet.tasks.unet3d.volumes import GeneratedVolumes
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

PATCH = 16
MODEL = {"type": "unet3d", "architecture": "tpu_reference", "num_classes": 3,
         "filters": [2, 4], "patch_size": [PATCH, PATCH, PATCH],
         "loss": {"name": "adaptive_dice"}}
RAW = {
    "name": "tiny_tpu_unet3d",
    "model": MODEL,
    "data": {"train": {"type": "generated_volumes", "shape": [PATCH, PATCH, PATCH]}},
    "train": {"batch_size": 2, "num_steps": 20, "optimizer": {"name": "adam"},
              "learning_rate": {"name": "constant", "learning_rate": 0.02}},
    "parallel": {"data": 1},
}


@pytest.fixture(scope="module")
def config():
    return validate(RAW)


@pytest.fixture(scope="module")
def task(config):
    return tasks.build_task(config)


def _batch(indices=(0, 1)) -> dict:
    source = GeneratedVolumes(num_volumes=4, shape=(PATCH,) * 3, seed=3, every_class=True)
    return {k: jnp.asarray(v) for k, v in source.batch(indices).items()}


def _size(tree) -> int:
    return sum(int(np.size(v)) for v in jax.tree.leaves(tree))


def test_defaults_parameter_count_by_hand_summary_and_fingerprint(task, config):
    m = config.model
    assert (m.norm, m.norm_epsilon, m.norm_momentum, m.negative_slope) == (
        "batch_norm", 1e-3, 0.99, 0.0)
    assert validate({**RAW, "model": {"type": "unet3d", "architecture": "tpu_reference",
                                      "num_classes": 3}}).model.filters == (32, 64, 128, 256)
    params, batch_stats = task.initial_variables()
    # conv(cin, cout) = 27 cin cout + cout (bias) + 2 cout (BatchNorm scale, offset)
    #   level 0: conv(1, 2) 54 + 2 + 4 = 60;     conv(2, 4) 216 + 4 + 8 = 228       -> 288
    #   level 1: conv(4, 4) 432 + 4 + 8 = 444;   conv(4, 8) 864 + 8 + 16 = 888      -> 1332
    #   decoder 0: transposed 2x2x2 8 -> 8: 512 + 8 = 520; concat 8 + 4 = 12 channels;
    #              conv(12, 4) 1296 + 4 + 8 = 1308; conv(4, 4) 444                 -> 2272
    #   output 1x1x1 4 -> 3 with bias: 12 + 3 = 15
    assert _size(params) == 288 + 1332 + 2272 + 15 == 3907
    assert tpu_reference_parameter_count(1, 3, (2, 4)) == 3907
    # running mean and variance of the 2 + 4 + 4 + 8 + 4 + 4 BatchNorm channels
    assert _size(batch_stats) == 2 * 26
    assert task.max_stride() == 2 and task.loss_name == "adaptive_dice"
    summary = tasks.family(config).summary(config, flops=False)
    assert summary["parameters"] == {"encoder": 288 + 1332, "decoder": 2272, "output": 15,
                                     "total": 3907}
    assert [lv["filters"] for lv in summary["levels"]] == [4, 8]
    assert "3,907" in tasks.family(config).format_summary(summary)
    assert tasks.fingerprint_fields(config)["model"] == {
        "type": "unet3d", "num_classes": 3, "in_channels": 1, "filters": [2, 4],
        "norm": "batch_norm", "architecture": "tpu_reference"}


def test_reference_parameter_count():
    """The 128^3 reference (1 input channel, 3 classes, filters 32, 64, 128, 256), summed by
    hand per level: encoder levels (conv(cin, f) + conv(f, 2f)), decoder levels (transposed
    conv + conv(c + 2f, 2f) + conv(2f, 2f)), output conv."""
    encoder = [960 + 55488, 110784 + 221568, 442752 + 885504, 1770240 + 3540480]
    decoder = [2097664 + 5309184 + 1770240, 524544 + 1327488 + 442752,
               131200 + 331968 + 110784]
    total = tpu_reference_parameter_count(1, 3, (32, 64, 128, 256))
    print(f"TPU reference 3D U-Net (128^3, 1 channel, 3 classes): {total:,} parameters")
    assert total == sum(encoder) + sum(decoder) + 195 == 19_073_795


def test_adaptive_dice_loss_by_hand():
    """2 classes, 4 voxels: p(class 1) = 0.2, 0.5, 0.5, 0.8, labels 0, 1, 1, 1.
    class 0: I = 0.8, U = 1 + (0.8 + 0.5 + 0.5 + 0.2) = 3, dice = 1.6 / 3;
    class 1: I = 0.5 + 0.5 + 0.8 = 1.8, U = 3 + 2 = 5, dice = 3.6 / 5 = 0.72;
    loss = 1 - (d0 exp(-d0) + d1 exp(-d1)) / (2 exp(-1)) = 0.098428..."""
    p1 = np.array([0.2, 0.5, 0.5, 0.8])
    logits = np.stack([np.zeros(4), np.log(p1 / (1 - p1))], -1).astype(np.float32)
    labels = np.array([0, 1, 1, 1], np.int32)
    d0, d1 = 1.6 / 3, 0.72
    expected = 1 - (d0 * math.exp(-d0) + d1 * math.exp(-d1)) / (2 * math.exp(-1))
    assert expected == pytest.approx(0.098428, abs=1e-6)
    one = adaptive_dice_loss(logits.reshape(1, 4, 1, 1, 2), labels.reshape(1, 4, 1, 1))
    np.testing.assert_allclose(one, expected, rtol=1e-5)
    # the same voxels as a batch of 2 examples: the sums run over the batch too
    two = jax.jit(adaptive_dice_loss)(logits.reshape(2, 2, 1, 1, 2), labels.reshape(2, 2, 1, 1))
    np.testing.assert_allclose(two, expected, rtol=1e-5)
    per_example = [adaptive_dice_loss(logits[None, i:i + 2, None, None],
                                      labels[None, i:i + 2, None, None]) for i in (0, 2)]
    assert abs(float(np.mean(per_example)) - expected) > 1e-2  # not a per-example mean
    # certain and right: 0
    perfect = 30.0 * jax.nn.one_hot(labels, 2).reshape(1, 4, 1, 1, 2)
    assert float(adaptive_dice_loss(perfect, labels.reshape(1, 4, 1, 1))) == pytest.approx(
        0.0, abs=1e-5)


@pytest.mark.slow
def test_train_step_compiles_once_learns_and_moves_batch_stats(config):
    task = tasks.build_task(config)  # its own: the step donates the model's initial arrays
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    stats0 = jax.device_get(state["batch_stats"])
    step = train_build.build_train_step(config, task, tx, schedule)
    batch = _batch()
    losses = []
    for _ in range(20):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert step._cache_size() == 1
    assert set(metrics) >= {"loss", "adaptive_dice_loss", "grad_norm"}
    assert np.isfinite(losses).all()
    assert np.mean(losses[-3:]) < 0.5 * losses[0], losses  # 0.49 -> about 0.12
    stats = jax.device_get(state["batch_stats"])
    moved = [float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(stats),
                                                        jax.tree.leaves(stats0), strict=True)]
    assert min(moved) > 1e-4, moved

    # eval mode normalizes with the running statistics: an example's logits do not depend on
    # the rest of the batch (they do in training), and they follow the statistics given
    params, images = state["params"], batch["images"]
    evaluated, same = task.apply(params, stats, images, train=False)
    assert same is stats
    alone, _ = task.apply(params, stats, images[:1], train=False)
    np.testing.assert_allclose(alone, evaluated[:1], rtol=1e-4, atol=1e-5)
    trained, _ = task.apply(params, stats, images, train=True)
    trained_alone, _ = task.apply(params, stats, images[:1], train=True)
    assert float(jnp.abs(trained_alone - trained[:1]).max()) > 1e-3
    initial, _ = task.apply(params, stats0, images, train=False)
    assert float(jnp.abs(initial - evaluated).max()) > 1e-3


def test_predict_jitted_equals_eager(task):
    params, stats = task.initial_variables()
    images = _batch()["images"]
    eager = task.predict(params, stats, images)
    jitted = jax.jit(task.predict)(params, stats, images)
    assert eager["probabilities"].shape == (2, PATCH, PATCH, PATCH, 3)
    np.testing.assert_allclose(jitted["probabilities"], eager["probabilities"], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(jitted["labels"], eager["labels"])


@pytest.mark.slow
def test_native_and_depth_stacked_lowerings_agree():
    images = _batch()["images"][:, :8, :8, :8]
    native = TPUReferenceUNet3D(1, 3, (2, 4), conv_lowering="native", rngs=nnx.Rngs(1))
    stacked = TPUReferenceUNet3D(1, 3, (2, 4), conv_lowering="depth_stacked",
                                 rngs=nnx.Rngs(1))
    for model in (native, stacked):  # move the running statistics off their initial values
        model(images)
    for train in (True, False):
        native.train() if train else native.eval()
        stacked.train() if train else stacked.eval()
        np.testing.assert_allclose(stacked(images), native(images), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="must divide by 2"):
        native(images[:, :7])


def test_config_errors():
    with pytest.raises(ConfigError, match=r"norm=instance_norm with model.architecture="
                                          r"tpu_reference: allowed batch_norm"):
        validate({**RAW, "model": {**MODEL, "norm": "instance_norm"}})
    with pytest.raises(ConfigError, match=r"norm=batch_norm with model.architecture=mlperf: "
                                          r"allowed instance_norm"):
        validate({**RAW, "model": {**MODEL, "architecture": "mlperf", "norm": "batch_norm"}})
    with pytest.raises(ConfigError, match="tpu_reference"):
        validate({**RAW, "model": {**MODEL, "architecture": "keras"}})
    # 4 levels pool 3 times: sides divide by 8
    with pytest.raises(ConfigError, match="multiple of 8"):
        validate({**RAW, "model": {**MODEL, "filters": [2, 4, 8, 16],
                                   "patch_size": [16, 16, 12]}})
    with pytest.raises(ValueError, match=r"train.accumulate_steps=2 with model.loss.name="
                                         r"adaptive_dice"):
        tasks.build_task(validate({**RAW, "train": {**RAW["train"], "accumulate_steps": 2}}))
    dice_ce = validate({**RAW, "model": {**MODEL, "loss": {"name": "dice_ce"}},
                        "train": {**RAW["train"], "accumulate_steps": 2}})
    assert dice_ce.model.loss.name == "dice_ce"
