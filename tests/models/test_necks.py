import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models.layers import BatchNormParams
from jaxdet.models.necks.fpn import FPN, upsample2x_like
from jaxdet.tasks.ssd.ssd_feature_maps import SSDFeatureMaps
from random_arrays import normal, seeds

BN = BatchNormParams()
apply = nnx.jit(lambda model, features: model(features))


def _features(channels: dict[int, int], sizes: dict[int, tuple[int, int]], batch=2, seed=0):
    keys = seeds(seed, len(channels))
    return {
        lvl: normal(k, (batch, *sizes[lvl], channels[lvl]))
        for k, lvl in zip(keys, sorted(channels), strict=True)
    }


def _ceil_sizes(h, w, levels):
    return {lvl: (-(-h // 2**lvl), -(-w // 2**lvl)) for lvl in levels}


def test_upsample2x_repeats_and_crops():
    x = jnp.arange(6.0).reshape(1, 2, 3, 1)
    y = upsample2x_like(x, jnp.zeros((1, 3, 5, 1)))
    np.testing.assert_array_equal(
        y[0, :, :, 0], [[0, 0, 1, 1, 2], [0, 0, 1, 1, 2], [3, 3, 4, 4, 5]]
    )


@pytest.mark.parametrize("image_hw", [(64, 64), (75, 101)])
def test_fpn_levels_3_to_7_with_odd_sizes(build_fast, image_hw):
    channels = {2: 8, 3: 16, 4: 24, 5: 40}
    sizes = _ceil_sizes(*image_hw, channels)
    fpn = build_fast(lambda: FPN(channels, 3, 7, 32, batch_norm=BN, rngs=nnx.Rngs(0)))
    out = apply(fpn, _features(channels, sizes))
    assert sorted(out) == [3, 4, 5, 6, 7]
    assert fpn.out_channels == {lvl: 32 for lvl in range(3, 8)}
    expected = _ceil_sizes(*image_hw, range(3, 8))
    for lvl, y in out.items():
        assert y.shape == (2, *expected[lvl], 32), lvl
        assert np.isfinite(np.asarray(y)).all()
    # Structure: laterals on backbone levels 3..5, smoothing below the top, 2 extra levels.
    assert len(fpn.lateral) == 3 and len(fpn.smoothing) == 2 and len(fpn.extra) == 2
    assert fpn.lateral[0].kernel.shape == (1, 1, 16, 32) and fpn.lateral[0].bias is not None
    assert fpn.extra[0].conv.strides == 2


def test_fpn_top_down_math(build_fast):
    """Identity-like weights: level 3 = smooth(lateral3 + up(lateral4 + up(lateral5)))."""
    channels = {3: 4, 4: 4, 5: 4}
    fpn = build_fast(lambda: FPN(channels, 3, 5, 4, batch_norm=BN, activation="none",
                                 rngs=nnx.Rngs(0)))
    fpn.eval()
    eye = jnp.eye(4).reshape(1, 1, 4, 4)
    for lat in fpn.lateral:
        lat.kernel[...] = eye
        lat.bias[...] = jnp.zeros(4)
    for sm in fpn.smoothing:
        sm.conv.kernel[...] = jnp.zeros((3, 3, 4, 4)).at[1, 1].set(jnp.eye(4))
        sm.norm.scale[...], sm.norm.bias[...] = jnp.ones(4), jnp.zeros(4)
        sm.norm.mean[...], sm.norm.var[...] = jnp.zeros(4), jnp.ones(4)
    feats = _features(channels, {3: (7, 5), 4: (4, 3), 5: (2, 2)})
    out = apply(fpn, feats)
    np.testing.assert_allclose(out[5], feats[5], rtol=1e-6)  # top: projection only
    p4 = feats[4] + upsample2x_like(feats[5], feats[4])
    p3 = feats[3] + upsample2x_like(p4, feats[3])
    bn_eval = 1.0 / np.sqrt(1.0 + 1e-3)  # running stats mean 0 var 1
    np.testing.assert_allclose(out[4], p4 * bn_eval, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[3], p3 * bn_eval, rtol=1e-5, atol=1e-6)


def test_fpn_max_level_below_backbone_top_and_depthwise():
    channels = {2: 8, 3: 16, 4: 24, 5: 40}
    fpn = nnx.eval_shape(lambda: FPN(channels, 2, 4, 16, batch_norm=BN, use_depthwise=True,
                                     rngs=nnx.Rngs(0)))
    assert len(fpn.lateral) == 3 and len(fpn.extra) == 0
    assert fpn.smoothing[0].conv.depthwise.kernel.shape == (3, 3, 1, 16)
    feats = {lvl: jax.ShapeDtypeStruct((1, *hw, channels[lvl]), jnp.float32)
             for lvl, hw in _ceil_sizes(64, 64, channels).items()}
    out = jax.eval_shape(lambda m, f: m(f), fpn, feats)
    assert {lvl: y.shape for lvl, y in out.items()} == {
        2: (1, 16, 16, 16), 3: (1, 8, 8, 16), 4: (1, 4, 4, 16)}
    with pytest.raises(ValueError, match="min_level"):
        FPN(channels, 1, 5, 16, batch_norm=BN, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("use_depthwise", [False, True])
def test_ssd_feature_maps_300(use_depthwise):
    channels = {4: 96, 5: 160}
    neck = nnx.eval_shape(lambda: SSDFeatureMaps(
        channels, (4, 5), (512, 256, 256, 128), batch_norm=BN, use_depthwise=use_depthwise,
        rngs=nnx.Rngs(0)))
    feats = {4: jax.ShapeDtypeStruct((2, 19, 19, 96), jnp.float32),
             5: jax.ShapeDtypeStruct((2, 10, 10, 160), jnp.float32)}
    out = jax.eval_shape(lambda m, f: m(f), neck, feats)
    assert {lvl: y.shape for lvl, y in out.items()} == {
        4: (2, 19, 19, 96), 5: (2, 10, 10, 160), 6: (2, 5, 5, 512), 7: (2, 3, 3, 256),
        8: (2, 2, 2, 256), 9: (2, 1, 1, 128)}
    assert neck.out_channels == {4: 96, 5: 160, 6: 512, 7: 256, 8: 256, 9: 128}
    first = neck.extra[0]
    assert first.reduce.conv.kernel.shape == (1, 1, 160, 256)
    if use_depthwise:
        assert first.downsample.conv.kernel.shape == (3, 3, 1, 256)
        assert first.project.conv.kernel.shape == (1, 1, 256, 512)
    else:
        assert first.downsample.conv.kernel.shape == (3, 3, 256, 512)


def test_ssd_feature_maps_runs(build_fast):
    channels = {4: 8, 5: 16}
    neck = build_fast(lambda: SSDFeatureMaps(channels, (4, 5), (32, 16), batch_norm=BN,
                                             rngs=nnx.Rngs(0)))
    feats = _features(channels, {4: (8, 8), 5: (4, 4)})
    out = apply(neck, feats)
    np.testing.assert_array_equal(out[5], feats[5])
    assert out[6].shape == (2, 2, 2, 32) and out[7].shape == (2, 1, 1, 16)
    assert float(jnp.min(out[7])) >= 0.0 and float(jnp.max(out[7])) <= 6.0  # relu6
    with pytest.raises(ValueError, match="source levels"):
        SSDFeatureMaps(channels, (3, 5), batch_norm=BN, rngs=nnx.Rngs(0))
