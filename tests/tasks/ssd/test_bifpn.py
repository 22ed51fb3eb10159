"""BiFPN: fusion, resampling and one node by hand; structure, parameter counts and checkpoint
names against effdet (tests/models/fixtures/make_bifpn_fixtures.py); outputs against a tiny
effdet BiFpn."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.interop.torch_names import (
    load_state_dict,
    torch_shape_to_ours,
    torch_state_dict_map,
)
from jaxdet.models.layers import BatchNormParams
from jaxdet.tasks.ssd.bifpn import (
    AfterCombine,
    BiFPN,
    Fnode,
    FpnCombine,
    bifpn_nodes,
    fuse,
    pool_same,
    upsample_like,
)
from random_arrays import normal, seeds

FIXTURES = Path(__file__).parents[2] / "models" / "fixtures"
BN = BatchNormParams()  # TF / effdet tf_* models: eps 1e-3
apply = nnx.jit(lambda model, features: model(features))


def _zeros_model(factory):
    """``factory()`` built abstractly, every variable zero (to be filled by the test)."""
    graphdef, state = nnx.split(nnx.eval_shape(factory))
    state = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), state)
    return nnx.merge(graphdef, state)


def _num_params(model) -> int:
    return sum(int(np.prod(v.shape)) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))


def test_bifpn_nodes_match_automl_layout():
    assert bifpn_nodes(3, 7) == [
        (6, (3, 4)), (5, (2, 5)), (4, (1, 6)), (3, (0, 7)),
        (4, (1, 7, 8)), (5, (2, 6, 9)), (6, (3, 5, 10)), (7, (4, 11)),
    ]
    assert bifpn_nodes(2, 4) == [(3, (1, 2)), (2, (0, 3)), (3, (1, 3, 4)), (4, (2, 5))]
    with pytest.raises(ValueError, match="max_level > min_level"):
        bifpn_nodes(3, 3)


def test_fuse_by_hand():
    a = jnp.full((1, 1, 2, 1), 2.0)
    b = jnp.array([[[[1.0], [-3.0]]]])
    # fastattn: relu(-1, 3) = (0, 3) -> 3 * b / (3 + 1e-4)
    np.testing.assert_allclose(
        fuse([a, b], jnp.array([-1.0, 3.0]), "fastattn")[0, 0, :, 0],
        [3 / 3.0001, -9 / 3.0001], rtol=1e-6)
    np.testing.assert_allclose(
        fuse([a, b], jnp.array([1.0, 1.0]), "fastattn")[0, 0, :, 0],
        [3 / 2.0001, -1 / 2.0001], rtol=1e-6)
    # attn: softmax(0, log 3) = (1/4, 3/4)
    np.testing.assert_allclose(
        fuse([a, b], jnp.array([0.0, np.log(3.0)]), "attn")[0, 0, :, 0],
        [0.5 + 0.75, 0.5 - 2.25], rtol=1e-6)
    np.testing.assert_array_equal(fuse([a, b, a], None, "sum")[0, 0, :, 0], [5.0, 1.0])
    half = fuse([a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)], jnp.ones(2), "fastattn")
    assert half.dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="needs edge_weights"):
        fuse([a, b], None, "attn")


def test_pool_same_on_odd_sizes_ignores_padding():
    x = -1.0 - jnp.arange(25.0).reshape(1, 5, 5, 1)  # all negative: a zero pad would win a max
    y = pool_same(x, 2, "max")[0, :, :, 0]
    # Windows start at rows/cols -0, 2, 4 (SAME pads 1 on each side for 5 -> 3, k=3, s=2:
    # total pad 2, so 1 before / 1 after); max over the valid cells of each window.
    expected = np.array([[-1, -2, -4], [-6, -7, -9], [-16, -17, -19]], np.float32)
    np.testing.assert_array_equal(y, expected)
    avg = pool_same(x, 2, "avg")[0, :, :, 0]
    xs = np.asarray(x[0, :, :, 0])
    rows = [slice(0, 2), slice(1, 4), slice(3, 5)]
    hand = np.array([[xs[r, c].mean() for c in rows] for r in rows])
    np.testing.assert_allclose(avg, hand, rtol=1e-6)
    assert pool_same(jnp.zeros((2, 6, 7, 3)), 2).shape == (2, 3, 4, 3)
    assert pool_same(jnp.zeros((1, 1, 1, 1)), 2).shape == (1, 1, 1, 1)


def test_upsample_repeats_and_crops():
    x = jnp.arange(6.0).reshape(1, 2, 3, 1)
    y = upsample_like(x, 2, (3, 5))[0, :, :, 0]
    np.testing.assert_array_equal(y, [[0, 0, 1, 1, 2], [0, 0, 1, 1, 2], [3, 3, 4, 4, 5]])


def _swish(v):
    return v / (1.0 + np.exp(-v))


def test_node_is_separable_conv_of_swish_of_fusion_then_bn():
    """A 1-channel P3 node with inputs P3 (3x3, 2 channels: 1x1 conv + BN) and P4 (2x2)."""
    def make():
        rngs = nnx.Rngs(0)
        combine = FpnCombine([2, 1], [3, 4], (0, 1), 3, 1, weight_method="fastattn",
                             pooling="max", batch_norm_params=BN, rngs=rngs)
        after = AfterCombine(1, separable=True, activation_name="swish",
                             batch_norm_params=BN, rngs=rngs)
        return Fnode(combine, after, 3)

    node = _zeros_model(make)
    node.eval()
    lateral = node.combine.resample["0"].conv
    lateral.conv.kernel[...] = jnp.array([1.0, -2.0]).reshape(1, 1, 2, 1)
    lateral.conv.bias[...] = jnp.array([0.5])
    lateral.bn.scale[...] = jnp.array([2.0])
    lateral.bn.bias[...] = jnp.array([0.25])
    lateral.bn.mean[...] = jnp.array([1.0])
    lateral.bn.var[...] = jnp.array([4.0 - 1e-3])  # 1 / sqrt(var + eps) = 1/2
    assert node.combine.resample["1"].conv is None
    node.combine.edge_weights[...] = jnp.array([1.0, 3.0])
    sep = node.after_combine.conv
    sep.conv_dw.kernel[...] = jnp.arange(1.0, 10.0).reshape(3, 3, 1, 1) / 10
    sep.conv_pw.kernel[...] = jnp.array([0.5]).reshape(1, 1, 1, 1)
    sep.conv_pw.bias[...] = jnp.array([0.1])
    sep.bn.scale[...] = jnp.array([3.0])
    sep.bn.bias[...] = jnp.array([-1.0])
    sep.bn.mean[...] = jnp.array([0.2])
    sep.bn.var[...] = jnp.array([0.25 - 1e-3])  # 1 / sqrt(var + eps) = 2

    rng = np.random.default_rng(0)
    p3 = rng.standard_normal((1, 3, 3, 2)).astype(np.float32)
    p4 = rng.standard_normal((1, 2, 2, 1)).astype(np.float32)
    out = node([jnp.asarray(p3), jnp.asarray(p4)], (3, 3))

    lat = p3[0, :, :, 0] * 1.0 - 2.0 * p3[0, :, :, 1] + 0.5
    lat = (lat - 1.0) / 2.0 * 2.0 + 0.25
    up = p4[0, :, :, 0][[0, 0, 1]][:, [0, 0, 1]]
    fused = _swish((1.0 * lat + 3.0 * up) / (4.0 + 1e-4))
    padded = np.pad(fused, 1)
    k = np.arange(1.0, 10.0).reshape(3, 3) / 10
    dw = np.array([[(padded[i:i + 3, j:j + 3] * k).sum() for j in range(3)] for i in range(3)])
    expected = ((0.5 * dw + 0.1) - 0.2) * 2.0 * 3.0 - 1.0
    np.testing.assert_allclose(out[0, :, :, 0], expected, rtol=1e-5, atol=1e-6)


D0 = dict(in_channels={3: 40, 4: 112, 5: 320}, num_filters=64, num_iterations=3)
D1 = dict(in_channels={3: 40, 4: 112, 5: 320}, num_filters=88, num_iterations=4)
D6 = dict(in_channels={3: 72, 4: 200, 5: 576}, num_filters=384, num_iterations=8,
          weight_method="sum")


@pytest.mark.parametrize("kwargs,count", [(D0, 196_281), (D1, 390_972), (D6, 10_583_808)],
                         ids=["d0", "d1", "d6_sum"])
@pytest.mark.slow
def test_parameter_counts_match_effdet(kwargs, count):
    model = nnx.eval_shape(lambda: BiFPN(min_level=3, max_level=7, batch_norm=BN,
                                         rngs=nnx.Rngs(0), **kwargs))
    assert _num_params(model) == count
    assert model.out_channels == {lvl: kwargs["num_filters"] for lvl in range(3, 8)}
    if kwargs.get("weight_method") == "sum":
        assert model.cell[0].fnode[0].combine.edge_weights is None


@pytest.mark.slow
def test_checkpoint_names_match_effdet_d0_fpn():
    fixture = json.loads((FIXTURES / "effdet_d0_fpn.json").read_text())
    model = nnx.eval_shape(lambda: BiFPN(min_level=3, max_level=7, batch_norm=BN,
                                         rngs=nnx.Rngs(0), **D0))
    mapping = torch_state_dict_map(model)
    assert set(mapping) == set(fixture["shapes"]), (
        f"only in ours: {sorted(set(mapping) - set(fixture['shapes']))[:5]}, "
        f"only in effdet: {sorted(set(fixture['shapes']) - set(mapping))[:5]}"
    )
    ours = {path: tuple(v.shape) for path, v in
            nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat)))}
    for key, shape in fixture["shapes"].items():
        path, transform = mapping[key]
        assert ours[path] == torch_shape_to_ours(transform, tuple(shape)), key
    assert fixture["num_params"] == _num_params(model)
    assert mapping["cell.2.fnode.4.combine.edge_weights"] == (
        ("cell", 2, "fnode", 4, "combine", "edge_weights"), "identity")
    assert mapping["cell.0.fnode.3.combine.resample.0.conv.conv.weight"][1] == "conv"
    assert mapping["cell.1.fnode.0.after_combine.conv.conv_dw.weight"][1] == "dwconv"
    assert model.cell[0].fnode[0].combine.edge_weights.dtype == jnp.float32


@pytest.mark.slow
def test_outputs_match_tiny_effdet_bifpn():
    ref = np.load(FIXTURES / "effdet_bifpn_tiny.npz")
    model = _zeros_model(lambda: BiFPN({3: 3, 4: 5, 5: 6}, 3, 7, 4, 2, batch_norm=BN,
                                       rngs=nnx.Rngs(0)))
    state_dict = {k[3:]: ref[k] for k in ref.files if k.startswith("sd/")}
    assert load_state_dict(model, state_dict) == []
    features = {lvl: jnp.asarray(ref[f"x/{lvl}"]) for lvl in (3, 4, 5)}
    model.eval()
    out = apply(model, features)
    for lvl in range(3, 8):
        np.testing.assert_allclose(out[lvl], ref[f"eval/{lvl}"], rtol=1e-4, atol=1e-4)
    model.train()
    out = apply(model, features)
    for lvl in range(3, 8):
        np.testing.assert_allclose(out[lvl], ref[f"train/{lvl}"], rtol=1e-4, atol=1e-4)


def _random_model(factory, seed: int = 0):
    """``factory()`` with host-side random weights, edge weights included: He-normal kernels,
    BatchNorm scale/var in [0.5, 1.5], everything else in [-0.5, 0.5]."""
    graphdef, state = nnx.split(nnx.eval_shape(factory))
    rng = np.random.default_rng(seed)

    for path, var in nnx.to_flat_state(state):
        if path[-1] == "kernel":
            value = rng.standard_normal(var.shape) * np.sqrt(2.0 / np.prod(var.shape[:-1]))
        elif path[-1] in ("scale", "var"):
            value = rng.uniform(0.5, 1.5, var.shape)
        else:
            value = rng.uniform(-0.5, 0.5, var.shape)
        var.set_value(jnp.asarray(value, var.dtype))
    return nnx.merge(graphdef, state)


@pytest.mark.parametrize("image_hw", [(128, 128), (75, 101)])
@pytest.mark.slow
def test_levels_3_to_7_shapes_and_jit_matches_eager(image_hw):
    channels = {3: 6, 4: 8, 5: 10}
    sizes = {lvl: (-(-image_hw[0] // 2**lvl), -(-image_hw[1] // 2**lvl)) for lvl in range(3, 8)}
    keys = seeds(0, 3)
    features = {lvl: normal(k, (2, *sizes[lvl], c))
                for k, (lvl, c) in zip(keys, channels.items(), strict=True)}
    model = _random_model(lambda: BiFPN(channels, 3, 7, 8, 1, weight_method="attn",
                                        batch_norm=BN, rngs=nnx.Rngs(0)))
    model.eval()
    out = apply(model, features)
    assert sorted(out) == [3, 4, 5, 6, 7]
    for lvl, y in out.items():
        assert y.shape == (2, *sizes[lvl], 8), lvl
        assert np.isfinite(np.asarray(y)).all()
    if image_hw == (75, 101):
        eager = model(features)
        for lvl in range(3, 8):
            np.testing.assert_allclose(out[lvl], eager[lvl], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_params(build_fast):
    channels = {3: 4, 4: 4, 5: 6}  # levels 3 and 4 need no 1x1 conv in the first cell
    model = build_fast(lambda: BiFPN(channels, 3, 6, 4, 1, weight_method="sum", batch_norm=BN,
                                     dtype=jnp.bfloat16, rngs=nnx.Rngs(0)))
    cell = model.cell[0]  # nodes: P5_td (2, 3), P4_td (1, 4), P3_out (0, 5), ...
    assert cell.fnode[0].combine.resample["2"].conv is not None  # backbone P5: 6 -> 4
    assert cell.fnode[1].combine.resample["1"].conv is None
    assert cell.fnode[2].combine.resample["0"].conv is None
    features = {lvl: jnp.ones((1, 16 // 2 ** (lvl - 3), 16 // 2 ** (lvl - 3), c))
                for lvl, c in channels.items()}
    out = apply(model, features)
    assert {lvl: y.dtype for lvl, y in out.items()} == {lvl: jnp.bfloat16 for lvl in range(3, 7)}
    params = nnx.state(model, nnx.Param)
    assert all(v.dtype == jnp.float32 for _, v in nnx.to_flat_state(params))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="weight_method"):
        BiFPN({3: 4, 4: 4, 5: 4}, 3, 7, 4, 1, weight_method="mean", batch_norm=BN,
              rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="backbone levels"):
        BiFPN({3: 4, 5: 4}, 3, 7, 4, 1, batch_norm=BN, rngs=nnx.Rngs(0))


def test_torch_names_maps_bare_params_and_still_rejects_unknown_variables():
    class Scaled(nnx.Module):
        def __init__(self):
            self.gamma = nnx.Param(jnp.ones((3,)))
            self.proj = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

    mapping = torch_state_dict_map(nnx.eval_shape(Scaled))
    assert mapping == {
        "gamma": (("gamma",), "identity"),
        "proj.weight": (("proj", "kernel"), "linear"),
        "proj.bias": (("proj", "bias"), "identity"),
    }

    class Counter(nnx.Module):
        def __init__(self):
            self.seen = nnx.BatchStat(jnp.zeros(()))

    with pytest.raises(ValueError, match="unmapped"):
        torch_state_dict_map(Counter())
