"""The PyTorch checkpoint mapping is a bijection onto our parameters, checked against
reference ``{key: shape}`` dumps of torchvision / timm models (see
tests/models/fixtures/make_fixtures.py). Models are built abstractly (``abstract_build``): no
weights are allocated."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.interop.torch_names import (
    load_state_dict,
    to_ours,
    torch_shape_to_ours,
    torch_state_dict_map,
)
from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.backbones.mobilenet import MobileNetV1, MobileNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import BatchNormParams

FIXTURES = Path(__file__).parents[1] / "models" / "fixtures"
BN = BatchNormParams(epsilon=1e-5)

BUILDERS = {
    "resnet50": lambda: ResNet(50, batch_norm=BN, rngs=model_rngs(0)),
    "resnet101": lambda: ResNet(101, batch_norm=BN, rngs=model_rngs(0)),
    "resnet152": lambda: ResNet(152, batch_norm=BN, rngs=model_rngs(0)),
    "mobilenetv1_100": lambda: MobileNetV1(1.0, batch_norm=BN, rngs=model_rngs(0)),
    "mobilenetv2_100": lambda: MobileNetV2(1.0, batch_norm=BN, rngs=model_rngs(0)),
    "mobilenetv2_035": lambda: MobileNetV2(0.35, batch_norm=BN, rngs=model_rngs(0)),
    "mobilenetv2_140": lambda: MobileNetV2(1.4, batch_norm=BN, rngs=model_rngs(0)),
}


def _fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _flat_shapes(model, filt):
    return {path: tuple(v.shape) for path, v in nnx.to_flat_state(nnx.state(model, filt))}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_mapping_is_a_bijection_with_matching_shapes_and_counts(name):
    fixture = _fixture(name)
    model = abstract_build(BUILDERS[name])
    mapping = torch_state_dict_map(model)
    ours = _flat_shapes(model, (nnx.Param, nnx.BatchStat))

    assert set(mapping) == set(fixture["shapes"]), (
        f"only in ours: {sorted(set(mapping) - set(fixture['shapes']))[:5]}, "
        f"only in reference: {sorted(set(fixture['shapes']) - set(mapping))[:5]}"
    )
    targets = [path for path, _ in mapping.values()]
    assert len(set(targets)) == len(targets) == len(ours)
    assert set(targets) == set(ours)
    for key, torch_shape in fixture["shapes"].items():
        path, transform = mapping[key]
        assert ours[path] == torch_shape_to_ours(transform, tuple(torch_shape)), key
    # Trainable parameter counts agree too (running statistics are not parameters).
    n = sum(int(np.prod(s)) for s in _flat_shapes(model, nnx.Param).values())
    assert n == _fixture(name)["num_params"]


def test_resnet50_reference_count():
    assert _fixture("resnet50")["num_params"] == 23_508_032


def test_transform_names():
    model = abstract_build(BUILDERS["mobilenetv2_100"])
    mapping = torch_state_dict_map(model)
    assert mapping["conv_stem.weight"] == (("conv_stem", "kernel"), "conv")
    assert mapping["blocks.1.0.conv_dw.weight"] == (("blocks", 1, 0, "conv_dw", "kernel"), "dwconv")
    assert mapping["bn2.running_var"] == (("bn2", "var"), "identity")
    resnet = torch_state_dict_map(abstract_build(BUILDERS["resnet50"]))
    assert resnet["layer2.0.downsample.1.running_mean"] == (
        ("layer2", 0, "downsample", 1, "mean"), "identity")
    w = np.arange(2 * 3 * 5 * 7).reshape(2, 3, 5, 7)  # OIHW
    assert to_ours("conv", w).shape == (5, 7, 3, 2)
    assert to_ours("conv", w)[4, 6, 2, 1] == w[1, 2, 4, 6]


def test_load_state_dict_places_transposed_values(build_fast):
    name = "mobilenetv2_035"
    model = build_fast(BUILDERS[name])
    rng = np.random.default_rng(0)
    state_dict = {k: rng.standard_normal(s).astype(np.float32)
                  for k, s in _fixture(name)["shapes"].items()}
    state_dict["bn1.num_batches_tracked"] = np.array(7)
    state_dict["classifier.weight"] = np.zeros((1000, 1280), np.float32)
    with pytest.raises(ValueError, match="classifier.weight"):
        load_state_dict(model, state_dict)
    unused = load_state_dict(model, state_dict, ignore_prefixes=("classifier.",))
    assert unused == []
    np.testing.assert_array_equal(
        model.blocks[2][1].conv_dw.kernel[...],
        jnp.asarray(state_dict["blocks.2.1.conv_dw.weight"].transpose(2, 3, 1, 0)))
    np.testing.assert_array_equal(model.bn2.var[...], state_dict["bn2.running_var"])
    bad = dict(state_dict, **{"conv_head.weight": np.zeros((1280, 100, 1, 1), np.float32)})
    with pytest.raises(ValueError, match="conv_head.weight"):
        load_state_dict(model, bad, ignore_prefixes=("classifier.",))
