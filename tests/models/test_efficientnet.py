"""EfficientNet B0-B7: the timm ``tf_efficientnet_b*`` checkpoint mapping (abstract models
against the ``{key: shape}`` fixtures), numeric equivalence with timm's B0 on fixed weights,
drop-connect, and jit vs eager on an odd input size. See fixtures/make_fixtures.py."""

import json
import math
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
from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.backbones.efficientnet import (
    VARIANTS,
    EfficientNet,
    MBConv,
    drop_connect,
    stage_repeats,
)
from jaxdet.models.layers import BatchNormParams
from random_arrays import normal
from torch_weights import torch_deterministic_weights

FIXTURES = Path(__file__).parent / "fixtures"
BN = BatchNormParams(momentum=0.99, epsilon=1e-3)  # TF EfficientNet


def _fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _flat_shapes(model, filt):
    return {path: tuple(v.shape) for path, v in nnx.to_flat_state(nnx.state(model, filt))}


def _b0():
    return EfficientNet("b0", batch_norm=BN, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.slow
def test_mapping_matches_timm_shapes_and_counts(variant):
    fixture = _fixture(f"tf_efficientnet_{variant}")
    model = abstract_build(lambda: EfficientNet(variant, batch_norm=BN, rngs=model_rngs(0)))
    mapping = torch_state_dict_map(model)  # raises unless it covers every variable once
    assert set(mapping) == set(fixture["shapes"]), (
        f"only in ours: {sorted(set(mapping) - set(fixture['shapes']))[:5]}, "
        f"only in reference: {sorted(set(fixture['shapes']) - set(mapping))[:5]}"
    )
    ours = _flat_shapes(model, (nnx.Param, nnx.BatchStat))
    for key, torch_shape in fixture["shapes"].items():
        path, transform = mapping[key]
        assert ours[path] == torch_shape_to_ours(transform, tuple(torch_shape)), key
    n = sum(int(np.prod(s)) for s in _flat_shapes(model, nnx.Param).values())
    assert n == fixture["num_params"]
    # out_channels are the last block of the level's stage, as the fixture shows.
    stage_of = {2: 1, 3: 2, 4: 4, 5: 6}
    for level, stage in stage_of.items():
        last = len(model.blocks[stage]) - 1
        key = f"blocks.{stage}.{last}.bn3.weight"
        assert fixture["shapes"][key] == [model.out_channels[level]]


def test_b0_structure_by_hand():
    model = nnx.eval_shape(_b0)
    assert stage_repeats("b0") == (1, 2, 2, 3, 3, 4, 1)
    assert stage_repeats("b7") == tuple(math.ceil(r * 3.1) for r in (1, 2, 2, 3, 3, 4, 1))
    assert model.out_channels == {2: 24, 3: 40, 4: 112, 5: 320}
    # Residuals only where stride 1 and channels match.
    skips = [[b.has_skip for b in stage] for stage in model.blocks]
    assert skips == [[False], [False, True], [False, True], [False, True, True],
                     [False, True, True], [False, True, True, True], [False]]
    # SE reduces to a quarter of the block *input* channels.
    assert model.blocks[0][0].se.conv_reduce.kernel.shape == (1, 1, 32, 8)
    assert model.blocks[1][0].se.conv_reduce.kernel.shape == (1, 1, 96, 4)
    assert model.blocks[5][1].conv_dw.kernel.shape == (5, 5, 1, 1152)
    # Drop-connect rate grows linearly with the global block index: rate * b / N.
    rates = [b.drop_rate for stage in model.blocks for b in stage]
    np.testing.assert_allclose(rates, [0.2 * i / 16 for i in range(16)])
    with pytest.raises(ValueError, match="b8"):
        EfficientNet("b8", batch_norm=BN, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def b0_timm(build_fast):
    """B0 with the fixture's deterministic weights, in eval mode."""
    model = build_fast(_b0)
    weights = torch_deterministic_weights(_fixture("tf_efficientnet_b0")["shapes"])
    assert load_state_dict(model, weights) == []
    model.eval()
    return model


@pytest.mark.slow
def test_matches_timm_tf_efficientnet_b0(b0_timm):
    ref = np.load(FIXTURES / "tf_efficientnet_b0_features.npz")
    out = nnx.jit(lambda m, x: m(x))(b0_timm, jnp.asarray(ref["x"]))
    assert out[2].shape == (1, 16, 16, 24)
    for level in (3, 4, 5):
        expected = ref[f"level{level}"]
        scale = float(np.abs(expected).max())
        assert scale > 0.05  # a live signal, not a vanished one
        np.testing.assert_allclose(np.asarray(out[level]), expected, rtol=0, atol=2e-4 * scale)


@pytest.mark.slow
def test_odd_input_sizes_ceil_divide():
    model = nnx.eval_shape(_b0)
    x = jax.ShapeDtypeStruct((1, 65, 65, 3), jnp.float32)
    out = nnx.eval_shape(lambda m, x: m(x), model, x)
    assert {k: v.shape[1:3] for k, v in out.items()} == {2: (17, 17), 3: (9, 9), 4: (5, 5),
                                                         5: (3, 3)}


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.slow
def test_block_jit_equals_eager_on_odd_input(build_fast, stride):
    block = build_fast(lambda: MBConv(8, 16, 5, stride, 6, drop_rate=0.1, bn_params=BN,
                                      activation_name="swish", dtype=None, rngs=nnx.Rngs(0)))
    block.eval()
    x = normal(0, (2, 9, 9, 8))
    eager = block(x)
    assert eager.shape == ((2, 5, 5, 16) if stride == 2 else (2, 9, 9, 16))
    jitted = nnx.jit(lambda m, x: m(x, rngs=nnx.Rngs(dropout=0)))(block, x)
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-5)


def test_drop_connect_by_hand():
    x = jnp.arange(1.0, 9.0).reshape(8, 1, 1, 1) * jnp.ones((8, 2, 2, 3))
    key = jax.random.key(3)
    y = drop_connect(x, 0.25, key)
    keep = np.asarray(jax.random.bernoulli(key, 0.75, (8, 1, 1, 1)))
    np.testing.assert_allclose(y, np.where(keep, np.asarray(x) / 0.75, 0.0), rtol=1e-6)
    assert 0 < keep.sum() < 8  # this key drops some samples and keeps others


@pytest.mark.slow
def test_block_drop_connect_modes(build_fast):
    rate = 0.5
    block = build_fast(lambda: MBConv(8, 8, 3, 1, 6, drop_rate=rate, bn_params=BN,
                                      activation_name="swish", dtype=None, rngs=nnx.Rngs(0)))
    assert block.has_skip and block.deterministic is False  # built in train mode
    x = normal(0, (16, 4, 4, 8))

    # Train mode without rngs: deterministic (batch-statistics BN, plain residual).
    plain = block(x)
    branch = np.asarray(plain - x)
    assert np.abs(branch).max() > 1e-2
    # Train mode with rngs: each sample's branch dropped or scaled by 1 / (1 - rate).
    dropped = np.asarray(block(x, rngs=nnx.Rngs(dropout=7)))
    keep = np.asarray(jax.random.bernoulli(nnx.Rngs(dropout=7).dropout(), 1 - rate,
                                           (16, 1, 1, 1)))
    assert 0 < keep.sum() < 16
    expected = np.asarray(x) + np.where(keep, branch / (1 - rate), 0.0)
    np.testing.assert_allclose(dropped, expected, rtol=1e-5, atol=1e-5)

    # eval() flips ``deterministic`` (and BN); rngs then change nothing.
    block.eval()
    assert block.deterministic is True
    np.testing.assert_array_equal(block(x, rngs=nnx.Rngs(dropout=7)), block(x))
    block.train()
    assert block.deterministic is False


@pytest.mark.slow
def test_train_mode_with_rngs_traces_whole_model_in_bfloat16():
    model = nnx.eval_shape(lambda: EfficientNet("b0", batch_norm=BN, dtype=jnp.bfloat16,
                                                rngs=nnx.Rngs(0)))
    x = jax.ShapeDtypeStruct((2, 64, 64, 3), jnp.float32)
    out = nnx.eval_shape(lambda m, x: m(x, rngs=nnx.Rngs(dropout=0)), model, x)
    assert {k: v.shape for k, v in out.items()} == {
        2: (2, 16, 16, 24), 3: (2, 8, 8, 40), 4: (2, 4, 4, 112), 5: (2, 2, 2, 320)}
    assert all(v.dtype == jnp.bfloat16 for v in out.values())
    assert all(v.dtype == jnp.float32 for _, v in nnx.to_flat_state(nnx.state(model)))


@pytest.mark.slow
def test_tf_level_blocks_take_tfs_fixed_layers_inside_deeper_stages():
    """The TF OD API's EfficientDet takes level 3 at ``stack_2/block_1`` and level 4 at
    ``stack_4/block_2`` whatever the depth: B1's stages 2 and 4 have 3 and 4 blocks, so its
    levels 3 and 4 come from inside them (by hand: the blocks run one by one), while the
    stages still run to their end for the next stage; B0's ends are those blocks."""
    from jaxdet.models.backbones.efficientnet import TF_LEVEL_BLOCKS

    assert stage_repeats("b1")[2] == 3 and stage_repeats("b1")[4] == 4
    net = EfficientNet("b1", batch_norm=BN, last_stage_blocks=1, level_blocks=TF_LEVEL_BLOCKS,
                       rngs=nnx.Rngs(0))
    net.eval()
    x = normal(3, (1, 64, 64, 3))

    @nnx.jit  # one program (run eagerly, B1's blocks compiled ~550 single operations)
    def levels_and_blocks(net, x):
        h = net.act(net.bn1(net.conv_stem(x)))
        for stage in list(net.blocks)[:2]:
            for block in stage:
                h = block(h)
        stage2 = list(net.blocks[2])
        at_block_1 = stage2[1](stage2[0](h))
        return net(x), at_block_1, stage2[2](at_block_1)

    out, at_block_1, at_stage_end = levels_and_blocks(net, x)
    np.testing.assert_allclose(out[3], at_block_1, rtol=1e-6, atol=1e-6)
    assert not np.allclose(out[3], at_stage_end, atol=1e-3)  # not the stage's end
    with pytest.raises(ValueError, match="level 4 cannot end after block 5"):
        EfficientNet("b1", batch_norm=BN, level_blocks={4: 5}, rngs=nnx.Rngs(0))
    b0 = EfficientNet("b0", batch_norm=BN, last_stage_blocks=1, rngs=nnx.Rngs(0))
    tf_b0 = EfficientNet("b0", batch_norm=BN, last_stage_blocks=1,
                         level_blocks=TF_LEVEL_BLOCKS, rngs=nnx.Rngs(0))
    b0.eval()
    tf_b0.eval()
    both = nnx.jit(lambda a, b, x: (a(x), b(x)))(b0, tf_b0, x)
    for level, value in both[0].items():
        np.testing.assert_array_equal(value, both[1][level])
