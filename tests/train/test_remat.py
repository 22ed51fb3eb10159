"""Gradient checkpointing (``train.remat``): a train step that recomputes parts of the model in
the backward pass equals the step that keeps their activations, and the lowered program holds
exactly one checkpoint per recomputed block (or head level / neck) with the extra convolutions
of its recomputation.

Three model families: RetinaNet (ResNet + FPN + weight-shared head, BatchNorm statistics
updated), EfficientDet (EfficientNet with drop-connect, whose random masks must be the same when
recomputed, + BiFPN + separable head) and SSD (MobileNetV2 + SSD feature maps + the plain
convolutional head).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet import builders
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.config.schema import RematTarget
from jaxdet.models import remat
from jaxdet.train.step import init_train_state, make_train_step

LR = 0.1
EPS32 = float(np.finfo(np.float32).eps)
SIZE = 64
MODELS = {
    "retinanet": ("shapes_demo", [
        "model.backbone.depth_multiplier=0.25", "model.neck.depth=16", "model.head.depth=16",
        "model.head.num_layers_before_predictor=1",
    ]),
    "efficientdet": ("efficientdet_d0", [
        "model.num_classes=3", "model.neck.num_filters=16", "model.neck.num_iterations=1",
        "model.head.depth=16", "model.head.num_layers_before_predictor=1", "precision=fp32",
        "model.backbone.drop_connect_rate=0.5",
    ]),
    "ssd": ("ssd_mobilenet_v2_320", [
        "model.num_classes=3", "model.backbone.depth_multiplier=0.35",
        "model.hard_example_miner=null",
    ]),
}
EVERYTHING = "train.remat=[backbone, neck, head]"


def _config(name: str, *extra: str):
    base, overrides = MODELS[name]
    resize = (
        [f"data.resizer.min_dimension={SIZE}", f"data.resizer.max_dimension={SIZE}",
         "data.augment=[]"]
        if name == "efficientdet" else
        [f"data.resizer.height={SIZE}", f"data.resizer.width={SIZE}"]
    )
    return load_config(base, [*overrides, *resize, "data.max_number_of_boxes=4", *extra])


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


def _step(config):
    """``(step, state)``: the jitted SGD train step of ``config`` and a fresh state."""
    task = builders.build_task(config, seed=0)
    tx = optax.sgd(LR)
    return make_train_step(task, tx, optax.constant_schedule(LR)), init_train_state(
        task, tx, ema=False)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_remat_step_equals_plain_step(name):
    batch = _batch()
    results = []
    for extra in ((), (EVERYTHING,)):
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


def _lowered_counts(config) -> tuple[int, int]:
    """(optimization barriers, convolutions) in the train step's lowered StableHLO."""
    step, state = _step(config)
    text = step.lower(state, _batch()).as_text()
    return text.count("stablehlo.optimization_barrier"), text.count("stablehlo.convolution")


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
    model = builders.build_model(_config("ssd"))
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
    model = builders.build_model(_config("retinanet"))
    with pytest.raises(ValueError, match="unknown remat target"):
        remat.set_remat(model, ["tower"])
    model.backbone.blocks_by_level = lambda: {3: [], 4: []}
    with pytest.raises(ValueError, match=r"level\(s\) \[5\].*levels \[3, 4\]"):
        remat.set_remat(model, ["backbone.level5"])


def test_forward_is_unchanged_outside_training():
    """Eval (no gradient) with remat flags gives the plain model's outputs bit for bit."""
    images = jnp.asarray(_batch()["images"])
    outs = []
    for extra in ((), (EVERYTHING,)):
        model = builders.build_model(_config("retinanet", *extra))
        model.eval()
        outs.append(jax.jit(lambda m, x: m(x))(model, images))
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
