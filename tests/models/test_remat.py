"""Gradient checkpointing (``train.remat``): a train step that recomputes parts of the model in
the backward pass equals the step that keeps their activations, and the lowered program holds
exactly one checkpoint per recomputed block (or head level) with the extra convolutions of its
recomputation.

The whole step is checked on RetinaNet (ResNet + FPN + weight-shared head, BatchNorm statistics
updated). Random layers are checked on the modules that have them, whose recomputed random
masks must equal the forward's: EfficientNet blocks with drop-connect, and the SSD
convolutional head with dropout.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.config.schema import RematTarget
from jaxdet.models import remat
from jaxdet.models.abstract import abstract_build
from jaxdet.models.backbones.efficientnet import MBConv
from jaxdet.models.layers import BatchNormParams
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.train.step import init_train_state, make_train_step
from random_arrays import normal

LR = 0.1
EPS32 = float(np.finfo(np.float32).eps)
SIZE = 64
MODELS = {
    "retinanet": ("shapes_demo", [
        "model.backbone.depth_multiplier=0.25", "model.neck.depth=16", "model.head.depth=16",
        "model.head.num_layers_before_predictor=1",
    ]),
    "ssd": ("ssd_mobilenet_v2_320", [
        "model.num_classes=3", "model.backbone.depth_multiplier=0.35",
        "model.hard_example_miner=null",
    ]),
    "center_net": ("centernet_shapes_demo", ["model.neck.depth=16", "model.head_depth=16"]),
}
EVERYTHING = "train.remat=[backbone, neck, head]"


def _config(name: str, *extra: str):
    base, overrides = MODELS[name]
    return load_config(base, [*overrides, f"data.resizer.height={SIZE}",
                              f"data.resizer.width={SIZE}", "data.max_number_of_boxes=4", *extra])


def _batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    y0, x0 = rng.uniform(0.0, 0.5, (2, 2, 4, 1))
    boxes = np.concatenate([y0, x0, y0 + 0.4, x0 + 0.4], -1).astype(np.float32)
    return {
        "images": rng.normal(size=(2, SIZE, SIZE, 3)).astype(np.float32),
        "boxes": boxes,
        "classes": rng.integers(0, 3, (2, 4)).astype(np.int32),
        "valid": np.ones((2, 4), bool),
        "ignore": np.zeros((2, 4), bool),
    }


def test_center_net_remat_refuses_what_it_cannot_recompute():
    with pytest.raises(ValueError, match="CenterNet can recompute .*not head"):
        tasks.build_task(_config("center_net", "train.remat=[head]"), seed=0)


def _step(config):
    """``(step, state)``: the jitted SGD train step of ``config`` and a fresh state."""
    task = tasks.build_task(config, seed=0)
    tx = optax.sgd(LR)
    return make_train_step(task, tx, optax.constant_schedule(LR)), init_train_state(
        task, tx, ema=False)


# Under -m exhaustive: the default suite compares RetinaNet's everything-recomputed step with
# the plain one-device step on a (2, 4) mesh (test_mesh_equivalence.py); CenterNet recomputes
# its backbone and neck through the same wrappers
@pytest.mark.parametrize("name, everything", [
    pytest.param("retinanet", EVERYTHING, marks=pytest.mark.exhaustive),
    pytest.param("center_net", "train.remat=[backbone, neck]", marks=pytest.mark.exhaustive)])
def test_remat_step_equals_plain_step(name, everything):
    batch = _batch()
    results = []
    for extra in ((), (everything,)):
        step, state = _step(_config(name, *extra))
        before = jax.device_get((state["params"], state["batch_stats"]))
        new, metrics = step(state, batch)
        results.append((jax.device_get(metrics), before, jax.device_get(new)))
    (m0, (before, stats0), s0), (m1, _, s1) = results
    np.testing.assert_allclose(m1["loss"], m0["loss"], rtol=1e-6)
    np.testing.assert_allclose(m1["grad_norm"], m0["grad_norm"], rtol=1e-5)
    # SGD: params_after - params_before = -LR * gradient, so this compares the gradients.
    # Tolerance: float reassociation of the recomputed forward, relative to the largest
    # update (a gradient that should be ~0, e.g. a bias ahead of a BatchNorm, is pure noise),
    # and the rounding of two float32 params (a few ulps of |p|).
    deltas = [(jax.tree_util.keystr(path), a - p, b - p) for (path, a), b, p in zip(
        jax.tree_util.tree_leaves_with_path(s1["params"]), jax.tree.leaves(s0["params"]),
        jax.tree.leaves(before), strict=True)]
    largest = max(float(np.max(np.abs(d0))) for _, _, d0 in deltas)
    for (key, d1, d0), p in zip(deltas, jax.tree.leaves(before), strict=True):
        atol = max(1e-6 * largest, 4 * EPS32 * float(np.max(np.abs(p))))
        np.testing.assert_allclose(d1, d0, rtol=1e-4, atol=atol, err_msg=key)
    assert largest > 0
    # the running statistics moved, and by the same amount
    assert any(np.any(a != b) for a, b in zip(jax.tree.leaves(s0["batch_stats"]),
                                              jax.tree.leaves(stats0), strict=True))
    for a, b in zip(jax.tree.leaves(s1["batch_stats"]), jax.tree.leaves(s0["batch_stats"]),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _loss(apply):
    def loss(module, x, rngs):
        return sum(jnp.sum(jnp.square(y)) for y in jax.tree.leaves(apply(module, x, rngs)))
    return loss


def _grads_with_and_without_remat(make, apply, x, mark) -> tuple:
    """Gradients of ``sum(apply(module, x, rngs) ** 2)`` w.r.t. the parameters of two copies of
    ``make()`` (same weights, same RNG state: clones), the second with ``mark(module)`` setting its
    remat flags; each call gets the same fresh ``nnx.Rngs(dropout=7)``."""
    grads = []
    for flagged in (False, True):
        module = make()
        if flagged:
            mark(module)
        grads.append(nnx.jit(nnx.grad(_loss(apply)))(module, x, nnx.Rngs(dropout=7)))
    return grads


def _assert_same_grads(g0, g1) -> None:
    largest = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(g0))
    assert largest > 0
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g1), jax.tree.leaves(g0),
                            strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * largest,
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.slow
def test_recomputed_drop_connect_masks_equal_the_forward_ones():
    """Two EfficientNet MBConv blocks with drop-connect 0.5: recomputing them in the backward
    pass draws the same per-sample masks (the gradients match), and the masks are real (the
    loss differs from the one without rngs, i.e. without drop-connect)."""
    x = normal(0, (8, 8, 8, 16))

    rngs = nnx.Rngs(0)
    base = nnx.List([MBConv(16, 16, 3, 1, 6, drop_rate=0.5, bn_params=BatchNormParams(),
                            activation_name="swish", dtype=None, rngs=rngs)
                     for _ in range(2)])

    def make():
        return nnx.clone(base)

    def apply(blocks, x, rngs):
        return remat.run_blocks(blocks, x, rngs=rngs)

    def mark(blocks):
        for block in blocks:
            block.remat = True

    _assert_same_grads(*_grads_with_and_without_remat(make, apply, x, mark))
    loss = nnx.jit(_loss(apply))
    assert not np.isclose(float(loss(make(), x, nnx.Rngs(dropout=7))),
                          float(loss(make(), x, None)), rtol=1e-3)


@pytest.mark.slow
def test_recomputed_head_dropout_equals_the_forward():
    """The SSD convolutional head with dropout (its own RNG stream), recomputed per level:
    same gradients; the dropout is real (switching it off changes the loss)."""
    maps = [normal(i, (2, s, s, 8)) for i, s in enumerate((8, 4))]

    base = ConvolutionalBoxPredictor([8, 8], 3, [3, 3], kernel_size=3,
                                     num_layers_before_predictor=1, depth=8,
                                     use_dropout=True, dropout_keep_prob=0.5, rngs=nnx.Rngs(0))

    def make():
        return nnx.clone(base)

    def apply(head, maps, rngs):
        return head(maps)

    def mark(head):
        head.remat = True

    _assert_same_grads(*_grads_with_and_without_remat(make, apply, maps, mark))
    no_dropout = make()
    no_dropout.dropout.deterministic = True
    loss = nnx.jit(_loss(apply))
    assert not np.isclose(float(loss(make(), maps, None)), float(loss(no_dropout, maps, None)),
                          rtol=1e-3)


def _lowered_counts(config) -> tuple[int, int]:
    """(optimization barriers, convolutions) in the train step's lowered StableHLO."""
    step, state = _step(config)
    text = step.lower(state, _batch()).as_text()
    return text.count("stablehlo.optimization_barrier"), text.count("stablehlo.convolution")


@pytest.mark.slow
def test_one_checkpoint_per_recomputed_block():
    """ResNet-18 ``layer4`` (level 5) is two BasicBlocks: two checkpoints, and recomputing them
    adds forward convolutions to the program (at most their 5: conv1 and conv2 of both blocks,
    the first one's downsample). The head is one checkpoint per level (3 levels)."""
    plain = _lowered_counts(_config("retinanet"))
    level5 = _lowered_counts(_config("retinanet", "train.remat=[backbone.level5]"))
    head = _lowered_counts(_config("retinanet", "train.remat=[head]"))
    assert plain[0] == 0
    assert level5[0] == 2
    assert 0 < level5[1] - plain[1] <= 5
    assert head[0] == 3
    assert head[1] > plain[1]


def test_blocks_by_level_cover_every_block():
    model = abstract_build(lambda: ssd_build.build_model(_config("ssd")))
    by_level = model.backbone.blocks_by_level()
    assert sorted(by_level) == [2, 3, 4, 5]
    n_blocks = sum(len(stage) for stage in model.backbone.blocks)
    assert sum(len(b) for b in by_level.values()) == n_blocks
    # MobileNetV2: stage 0 (1 block) + stage 1 (2) lead to level 2; stages 5-6 (3 + 1) to 5
    assert len(by_level[2]) == 3 and len(by_level[5]) == 4


def test_targets_match_the_config_schema():
    assert remat.REMAT_TARGETS == RematTarget.__args__


def test_unknown_target_is_named_with_the_allowed_values():
    with pytest.raises(ConfigError, match=r"train\.remat.*backbone\.level5"):
        _config("retinanet", "train.remat=[backbone.level9]")
    model = ssd_build.build_model(_config("retinanet"))
    with pytest.raises(ValueError, match="unknown remat target"):
        remat.set_remat(model, ["tower"])
    model.backbone.blocks_by_level = lambda: {3: [], 4: []}
    with pytest.raises(ValueError, match=r"level\(s\) \[5\].*levels \[3, 4\]"):
        remat.set_remat(model, ["backbone.level5"])


@pytest.mark.slow
def test_forward_is_unchanged_outside_training():
    """Eval (no gradient) with remat flags gives the plain model's outputs bit for bit."""
    images = jnp.asarray(_batch()["images"])
    outs = []
    for extra in ((), (EVERYTHING,)):
        model = ssd_build.build_model(_config("retinanet", *extra))
        model.eval()
        outs.append(jax.jit(lambda m, x: m(x))(model, images))
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
