"""BatchNorm statistics over the global batch (GSPMD, across devices) or per device
(``parallel.batch_norm_statistics``): the grouped layer against hand-computed values and against
plain BatchNorms on slices, and one tiny train step on a mesh against one device."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.models.layers import BatchNorm, BatchNormParams, batch_norm, set_batch_norm_groups
from jaxdet.parallel.mesh import make_mesh
from jaxdet.parallel.sharding import batch_sharding, place, place_batch, state_sharding
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state, make_train_step
from random_arrays import normal

BATCH = 8
# Height 128 = largest stride 32 x spatial 4, so the (2, 4) mesh is a legal layout. SGD with
# momentum at rate 0.1 makes the parameter update linear in the gradient and large enough to
# compare (Adam's first update is lr * sign(g): a gradient that is zero up to rounding flips it).
MESH_OVERRIDES = [
    f"train.batch_size={BATCH}",
    "data.resizer.height=128",
    "train.optimizer.name=momentum",
    "train.learning_rate.warmup_learning_rate=0.1",
    "train.learning_rate.learning_rate_base=0.1",
]


def _stats(bn: nnx.BatchNorm) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(bn.mean[...]).copy(), np.asarray(bn.var[...]).copy()


# ----------------------------------------------------------------------------- the layer


def test_grouped_statistics_hand_computed():
    # Channel 0 rows: group 0 = {1, 3} (mean 2, var 1), group 1 = {10, 14} (mean 12, var 4).
    # Channel 1 = -2 x channel 0: group means -4, -24; variances 4, 16.
    c0 = np.array([1.0, 3.0, 10.0, 14.0], np.float32)
    x = np.stack([c0, -2 * c0], axis=-1).reshape(4, 1, 1, 2)
    bn = BatchNorm(2, num_groups=2, momentum=0.5, epsilon=0.0, rngs=nnx.Rngs(0))
    bn.scale[...] = jnp.array([2.0, 1.0])
    bn.bias[...] = jnp.array([0.5, -1.0])
    y = np.asarray(bn(jnp.asarray(x))).reshape(4, 2)
    # every group is {mean - std, mean + std}, so normalized -1, +1, -1, +1 (channel 1 flips)
    z = np.array([-1.0, 1.0, -1.0, 1.0])
    np.testing.assert_allclose(y[:, 0], 2.0 * z + 0.5, rtol=1e-6)
    np.testing.assert_allclose(y[:, 1], -z - 1.0, rtol=1e-6)
    # running stats start at mean 0, var 1; new = 0.5 old + 0.5 mean over groups, of the
    # groups' unbiased variances (2 values each: twice the variances above: 2, 8 and 8, 32)
    mean, var = _stats(bn)
    np.testing.assert_allclose(mean, [0.5 * 7.0, 0.5 * -14.0], rtol=1e-6)
    np.testing.assert_allclose(var, [0.5 + 0.5 * 5.0, 0.5 + 0.5 * 20.0], rtol=1e-6)
    # the whole batch's variance (27.5 for channel 0, unbiased 4/3 of it) would also count
    # the spread of the group means; num_groups=1 takes it
    bn1 = BatchNorm(2, num_groups=1, momentum=0.5, epsilon=0.0, rngs=nnx.Rngs(0))
    bn1(jnp.asarray(x))
    np.testing.assert_allclose(_stats(bn1)[1], [0.5 + 0.5 * 27.5 * 4 / 3,
                                                0.5 + 0.5 * 110.0 * 4 / 3], rtol=1e-6)


def _random_bn(num_groups: int, dtype=None) -> BatchNorm:
    params = BatchNormParams(momentum=0.9, epsilon=1e-3, num_groups=num_groups)
    bn = batch_norm(3, params, dtype, nnx.Rngs(0))
    bn.scale[...] = jnp.array([1.5, 0.5, 2.0])
    bn.bias[...] = jnp.array([0.1, -0.2, 0.3])
    bn.mean[...] = jnp.array([0.5, -1.0, 2.0])
    bn.var[...] = jnp.array([4.0, 0.25, 1.0])
    return bn


def _slice_batch() -> jax.Array:
    """[8, 5, 4, 3] with a different offset and spread per 2-row slice."""
    x = normal(0, (BATCH, 5, 4, 3))
    per_row = jnp.repeat(jnp.arange(4.0), 2)[:, None, None, None]
    return x * (1.0 + per_row) + 3.0 * per_row


@pytest.mark.slow
def test_grouped_batch_norm_equals_plain_batch_norms_on_slices():
    x = _slice_batch()
    grouped = _random_bn(4)
    assert grouped.num_groups == 4
    y = grouped(x)
    plains = [_random_bn(1) for _ in range(4)]
    ys = [bn(x[2 * g: 2 * g + 2]) for g, bn in enumerate(plains)]
    np.testing.assert_allclose(y, jnp.concatenate(ys), rtol=1e-6, atol=1e-6)
    mean, var = _stats(grouped)
    np.testing.assert_allclose(mean, np.mean([_stats(b)[0] for b in plains], 0), rtol=1e-6)
    np.testing.assert_allclose(var, np.mean([_stats(b)[1] for b in plains], 0), rtol=1e-6)

    # gradients flow as through the four plain layers (scale/bias grads add up over slices)
    def loss(bn, x):
        return jnp.sum(bn(x) * x)

    g_grouped = nnx.grad(loss)(_random_bn(4), x)
    g_plain = [nnx.grad(loss)(_random_bn(1), x[2 * g: 2 * g + 2]) for g in range(4)]
    for name in ("scale", "bias"):
        np.testing.assert_allclose(g_grouped[name][...],
                                   sum(g[name][...] for g in g_plain), rtol=1e-5, atol=1e-5)


def test_one_group_is_flax_batch_norm_exactly_and_eval_ignores_groups():
    x = _slice_batch()
    ours, ref = _random_bn(1), nnx.BatchNorm(3, momentum=0.9, epsilon=1e-3, rngs=nnx.Rngs(0))
    for name in ("scale", "bias", "mean", "var"):
        getattr(ref, name)[...] = getattr(ours, name)[...]
    old = np.asarray(_stats(ours)[1])
    np.testing.assert_array_equal(ours(x), ref(x))
    np.testing.assert_array_equal(_stats(ours)[0], _stats(ref)[0])
    # flax averages in the biased batch variance; jaxdet the unbiased one (TF's, PyTorch's)
    n = x.size // x.shape[-1]
    flax_var = np.asarray(_stats(ref)[1])  # 0.9 old + 0.1 biased
    np.testing.assert_allclose(_stats(ours)[1], flax_var + (flax_var - 0.9 * old) / (n - 1),
                               rtol=1e-5)
    grouped, plain = _random_bn(4), _random_bn(1)
    grouped.eval()
    plain.eval()
    np.testing.assert_array_equal(grouped(x), plain(x))
    assert np.array_equal(_stats(grouped)[0], _stats(plain)[0])


def test_grouped_batch_norm_dtypes_and_bad_batch():
    bn = _random_bn(4, jnp.bfloat16)
    x = _slice_batch().astype(jnp.bfloat16)
    assert bn(x).dtype == jnp.bfloat16
    assert bn.mean.dtype == jnp.float32 and bn.var.dtype == jnp.float32
    ref_y = jnp.concatenate([_random_bn(1, jnp.bfloat16)(x[2 * g: 2 * g + 2])
                             for g in range(4)])
    np.testing.assert_allclose(np.asarray(bn(x), np.float32), np.asarray(ref_y, np.float32),
                               rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="num_groups=4.*divides by 4, got 6"):
        _random_bn(4)(_slice_batch()[:6])
    with pytest.raises(ValueError, match="num_groups"):
        BatchNorm(3, num_groups=0, rngs=nnx.Rngs(0))


def test_build_model_sets_groups_from_parallel_config(tiny_overrides):
    def groups(*overrides):
        model = ssd_build.build_model(load_config("shapes_demo", tiny_overrides + list(overrides)))
        found = {m.num_groups for _, m in nnx.iter_modules(model) if isinstance(m, BatchNorm)}
        assert found, "the tiny model has BatchNorms"
        return found

    n = jax.device_count()
    assert groups() == {1}
    assert groups("parallel.batch_norm_statistics=per_device") == {1}  # parallel.data=1
    assert groups("parallel.data=-1", "parallel.spatial=2",
                  "parallel.batch_norm_statistics=per_device") == {n // 2}
    assert groups("parallel.data=4", "parallel.batch_norm_statistics=per_device") == {4}
    assert groups("parallel.data=-1") == {1}  # global statistics
    # a model built for predict/export on fewer devices than it trained on still builds
    assert groups("parallel.data=16", "parallel.batch_norm_statistics=per_device") == {16}


def test_set_batch_norm_groups_reaches_nested_layers():
    model = nnx.Sequential(_random_bn(1), nnx.Sequential(_random_bn(1)))
    set_batch_norm_groups(model, 2)
    assert [m.num_groups for _, m in nnx.iter_modules(model) if isinstance(m, BatchNorm)] == [2, 2]


def test_per_device_normalization_has_no_cross_device_reduction():
    """On an (8, 1) mesh, G=8 normalizes each shard with its own statistics: the compiled
    forward pass has no collective; global statistics (G=1) all-reduce them."""
    mesh = make_mesh(8, 1)
    x = jax.ShapeDtypeStruct((BATCH, 16, 16, 4), jnp.float32,
                             sharding=NamedSharding(mesh, P("data")))

    def collectives(num_groups: int) -> set[str]:
        graphdef, state = nnx.split(BatchNorm(4, num_groups=num_groups, rngs=nnx.Rngs(0)))
        fn = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
        hlo = fn.lower(state, x).compile().as_text()
        return set(re.findall(r"\b(all-reduce|all-gather|collective-permute|all-to-all)\(", hlo))

    assert collectives(1) == {"all-reduce"}
    assert collectives(8) == set()


# ----------------------------------------------------------------------------- train step


def _batch(size: tuple[int, int]) -> dict:
    h, w = size
    rng = np.random.default_rng(0)
    # each pair of rows (one data shard of a 4-way split) has its own brightness and contrast,
    # so per-shard statistics differ clearly from the global ones
    offset = np.repeat(np.arange(4, dtype=np.float32), 2)[:, None, None, None]
    images = rng.normal(size=(BATCH, h, w, 3)).astype(np.float32) * (1 + offset) + offset
    boxes = np.zeros((BATCH, 8, 4), np.float32)
    boxes[:, 0] = [0.1, 0.1, 0.6, 0.5]
    boxes[:, 1] = [0.4, 0.3, 0.9, 0.95]
    valid = np.zeros((BATCH, 8), bool)
    valid[:, :2] = True
    classes = np.tile(np.array([0, 1, 0, 0, 0, 0, 0, 0], np.int32), (BATCH, 1))
    return {"images": images, "boxes": boxes, "classes": classes, "valid": valid,
            "ignore": np.zeros((BATCH, 8), bool)}


def _one_step(config, mesh_shape: tuple[int, int] | None):
    """(initial state, state after one train step, metrics), all on the host."""
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    before = jax.device_get(state)
    batch = _batch(task.input_size)
    batch = {k: batch[k] for k in task.batch_layout()}
    if mesh_shape is None:
        step = make_train_step(task, tx, schedule)
    else:
        mesh = make_mesh(*mesh_shape)
        s_shard, b_shard = state_sharding(mesh, state), batch_sharding(mesh, task.batch_layout())
        state, batch = place(state, s_shard), place_batch(batch, b_shard)
        step = make_train_step(task, tx, schedule, state_sharding=s_shard,
                               batch_sharding=b_shard)
    new_state, metrics = step(state, batch)
    return before, jax.device_get(new_state), jax.device_get(metrics)


# Parameters after one step at rate 0.1: the single-device step sums each BatchNorm gradient
# over 8 x 128 x 64 rows in one float32 reduction, a mesh in per-device partial sums, which
# moves some of them by up to ~4e-6 (the (8, 1) and (2, 4) meshes agree with each other to
# 1e-7). Updates are 1e-4 .. 1e-2 and a wrong statistic changes them by O(1).
PARAMS_ATOL = 1e-5


def _assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    flat_a, tree_a = jax.tree_util.tree_flatten_with_path(a)
    flat_b, tree_b = jax.tree_util.tree_flatten_with_path(b)
    assert tree_a == tree_b
    for (path, x), (_, y) in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol,
                                   err_msg=jax.tree_util.keystr(path))


def _assert_changed(before, after):
    assert any(not np.array_equal(x, y)
               for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True))


@pytest.fixture(scope="module")
def global_single(tiny_overrides):
    """The tiny model's step on one device, global statistics."""
    config = load_config("shapes_demo", tiny_overrides + MESH_OVERRIDES)
    return _one_step(config, None)


# data x spatial (2, 4) under -m exhaustive: the mesh tests check that layout for the whole step
@pytest.mark.parametrize("mesh_shape", [(8, 1), pytest.param((2, 4), marks=pytest.mark.exhaustive)])
@pytest.mark.slow
def test_global_statistics_on_a_mesh_equal_one_device(tiny_overrides, global_single, mesh_shape):
    before, single, single_metrics = global_single
    config = load_config("shapes_demo", tiny_overrides + MESH_OVERRIDES + [
        f"parallel.data={mesh_shape[0]}", f"parallel.spatial={mesh_shape[1]}"])
    _, sharded, metrics = _one_step(config, mesh_shape)
    _assert_changed(before["batch_stats"], single["batch_stats"])
    _assert_changed(before["params"], single["params"])
    _assert_trees_close(sharded["batch_stats"], single["batch_stats"])
    _assert_trees_close(sharded["params"], single["params"], atol=PARAMS_ATOL)
    np.testing.assert_allclose(metrics["loss"], single_metrics["loss"], rtol=1e-5)


@pytest.mark.slow
def test_per_device_statistics_on_a_mesh_equal_one_device(tiny_overrides, global_single):
    config = load_config("shapes_demo", tiny_overrides + MESH_OVERRIDES + [
        "parallel.data=4", "parallel.batch_norm_statistics=per_device"])
    _, single, single_metrics = _one_step(config, None)  # G=4 groups, computed on one device
    _, sharded, metrics = _one_step(config, (4, 1))
    _assert_trees_close(sharded["batch_stats"], single["batch_stats"])
    _assert_trees_close(sharded["params"], single["params"], atol=PARAMS_ATOL)
    np.testing.assert_allclose(metrics["loss"], single_metrics["loss"], rtol=1e-5)
    # and per-device statistics really are not the global ones
    global_stats = global_single[1]["batch_stats"]
    differs = [not np.allclose(a, b, rtol=1e-3) for a, b in
               zip(jax.tree.leaves(single["batch_stats"]), jax.tree.leaves(global_stats),
                   strict=True)]
    assert sum(differs) > len(differs) // 2
