"""ResNet-18/34 (basic blocks), the width multiplier and the shared prediction tower."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import BatchNormParams
from jaxdet.tasks.ssd.heads.weight_shared import WeightSharedBoxPredictor


def _count(model) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_resnet18_and_34_parameter_counts_equal_torchvision_without_fc():
    # torchvision resnet18: 11,689,512 params, resnet34: 21,797,672; fc is 512*1000 + 1000.
    for depth, total in ((18, 11_689_512), (34, 21_797_672)):
        model = nnx.eval_shape(lambda d=depth: ResNet(d, batch_norm=BatchNormParams(),
                                                       rngs=nnx.Rngs(0)))
        assert _count(model) == total - 513_000
        assert model.out_channels == {2: 64, 3: 128, 4: 256, 5: 512}


def test_narrow_resnet18_shapes_and_relu6_option():
    model = ResNet(18, batch_norm=BatchNormParams(), width_multiplier=0.25,
                   activation_name="relu6", rngs=nnx.Rngs(0))
    assert model.out_channels == {2: 16, 3: 32, 4: 64, 5: 128}
    model.eval()
    feats = model(jnp.ones((1, 64, 64, 3)))
    assert {k: v.shape for k, v in feats.items()} == {
        2: (1, 16, 16, 16), 3: (1, 8, 8, 32), 4: (1, 4, 4, 64), 5: (1, 2, 2, 128)}
    assert float(jnp.max(feats[5])) <= 6.0


def test_shared_prediction_tower_has_one_tower_feeding_both_predictors():
    kw = dict(levels=[3, 4], depth=8, num_layers_before_predictor=2, rngs=nnx.Rngs(0))
    shared = WeightSharedBoxPredictor(8, 3, 2, share_prediction_tower=True, **kw)
    separate = WeightSharedBoxPredictor(8, 3, 2, **kw)
    assert shared.class_tower is None
    tower = 2 * (3 * 3 * 8 * 8) + 2 * 2 * 2 * 8  # two 3x3 convs + per-level BN scale/bias
    assert _count(separate) - _count(shared) == tower
    feats = {3: jnp.ones((1, 4, 4, 8)), 4: jnp.ones((1, 2, 2, 8))}
    shared.eval()
    logits, boxes = shared(feats)
    assert [x.shape for x in logits] == [(1, 32, 3), (1, 8, 3)]
    assert [x.shape for x in boxes] == [(1, 32, 4), (1, 8, 4)]
