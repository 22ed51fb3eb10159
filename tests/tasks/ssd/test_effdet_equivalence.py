"""jaxdet's efficientdet_d0 is effdet's ``tf_efficientdet_d0`` (the PyTorch port of the official
TF EfficientDet): the same parameters one-to-one, and the same backbone, BiFPN and head outputs
for the same weights and input. The reference outputs come from
``tests/models/fixtures/make_effdet_fixture.py`` (run offline with effdet; the suite never
imports torch)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.config.loader import load_config
from jaxdet.interop.torch_names import torch_shape_to_ours
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.effdet_names import effdet_state_dict_map, load_effdet_state_dict
from jaxdet.tasks.ssd.model import concat_levels
from jaxdet.tasks.weights import load_weights
from torch_weights import torch_deterministic_weights

FIXTURES = Path(__file__).parents[2] / "models" / "fixtures"
FIXTURE = json.loads((FIXTURES / "effdet_d0.json").read_text())
SIZE = FIXTURE["image_size"][0]
LEVELS = (3, 4, 5, 6, 7)

pytestmark = pytest.mark.xdist_group("efficientdet_d0")


def _config(extra=()):
    return load_config("efficientdet_d0", [
        *extra, "precision=fp32", f"data.resizer.min_dimension={SIZE}",
        f"data.resizer.max_dimension={SIZE}",
        f"data.augment=[{{name: random_scale_crop_and_pad_to_square, output_size: {SIZE}}}]",
    ])


@pytest.fixture(scope="module")
def detector(build_fast):
    model = build_fast(lambda: ssd_build.build_model(_config()))
    assert load_effdet_state_dict(model, torch_deterministic_weights(FIXTURE["shapes"])) == []
    model.eval()
    return model


def test_parameters_map_one_to_one_with_effdet():
    model = abstract_build(lambda: ssd_build.build_model(_config()))
    mapping = effdet_state_dict_map(model)
    assert set(mapping) == set(FIXTURE["shapes"])
    ours = dict(nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat))))
    assert len({path for path, _ in mapping.values()}) == len(ours)
    for key, shape in FIXTURE["shapes"].items():
        path, transform = mapping[key]
        assert tuple(ours[path].shape) == torch_shape_to_ours(transform, tuple(shape)), key
    counts = {name: sum(int(np.prod(v.shape)) for _, v in
                        nnx.to_flat_state(nnx.state(getattr(model, name), nnx.Param)))
              for name in ("backbone", "neck", "head")}
    n = FIXTURE["num_params"]
    assert counts == {"backbone": n["backbone"], "neck": n["fpn"],
                      "head": n["class_net"] + n["box_net"]}
    assert mapping["class_net.bn_rep.2.4.bn.running_var"] == (
        ("head", "class_norms", 2, 4, "var"), "identity")


def test_outputs_equal_effdet(detector):
    ref = np.load(FIXTURES / "effdet_d0_outputs.npz")

    @jax.jit
    def run(state, x):
        model = nnx.merge(graphdef, state)
        backbone = model.backbone(x)
        fpn = model.neck(backbone)
        class_logits, box_encodings = model.head(fpn)
        return backbone, fpn, class_logits, box_encodings

    graphdef, state = nnx.split(detector)
    backbone, fpn, class_logits, box_encodings = run(state, jnp.asarray(ref["input"]))

    def close(ours, expected, name):
        scale = float(np.abs(expected).max())
        assert scale > 1e-2, name  # a live signal
        np.testing.assert_allclose(np.asarray(ours), expected, rtol=0, atol=5e-4 * scale,
                                   err_msg=name)

    for level in (3, 4, 5):
        close(backbone[level], ref[f"backbone_p{level}"], f"backbone P{level}")
    for i, level in enumerate(LEVELS):
        close(fpn[level], ref[f"fpn_p{level}"], f"BiFPN P{level}")
        close(box_encodings[i], ref[f"box_p{level}"], f"box P{level}")
        logits = np.asarray(class_logits[i])
        close(logits[..., :8], ref[f"class_p{level}"], f"class P{level}")
        np.testing.assert_allclose(logits.mean(axis=1), ref[f"class_mean_p{level}"], atol=1e-4)
        np.testing.assert_allclose(logits.std(axis=1), ref[f"class_std_p{level}"], atol=1e-4)
    # The detector's own forward concatenates exactly these levels.
    all_logits, _ = concat_levels({"class_logits": class_logits, "box_encodings": box_encodings})
    assert all_logits.shape == (1, 9 * sum((SIZE // 2**lvl) ** 2 for lvl in LEVELS), 90)


def _flat(module) -> dict[str, np.ndarray]:
    state = nnx.state(module, (nnx.Param, nnx.BatchStat))
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(state)}


@pytest.fixture(scope="module")
def effdet_file(tmp_path_factory) -> Path:
    """effdet's state dict as a ``.safetensors`` file written by the reference library, with
    the ``num_batches_tracked`` counters torch keeps beside every BatchNorm."""
    from safetensors.numpy import save_file

    state = dict(torch_deterministic_weights(FIXTURE["shapes"]))
    for key in list(state):
        if key.endswith("running_var"):
            state[key.replace("running_var", "num_batches_tracked")] = np.array(7, np.int64)
    path = tmp_path_factory.mktemp("effdet") / "tf_efficientdet_d0.safetensors"
    save_file(state, str(path))
    return path


def test_effdet_file_loads_as_the_whole_detector(detector, effdet_file, build_fast):
    config = _config()
    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    report = load_weights(model, config, effdet_file)  # format auto: torch
    assert len(report.restored) == len(FIXTURE["shapes"])
    assert report.reinitialized == [] and report.unused == []
    expected, ours = _flat(detector), _flat(model)
    assert set(expected) == set(ours)
    for name, value in expected.items():  # the detector whose outputs equal effdet's
        np.testing.assert_array_equal(ours[name], value, err_msg=name)


@pytest.mark.parametrize("restore", ["fitting", "detection"])
def test_effdet_file_restores_for_another_class_count(detector, effdet_file, build_fast,
                                                      restore):
    """``fitting``: all but the class predictor; ``detection`` (as TF2): EfficientNet and
    BiFPN, the head keeps its initialization."""
    config = _config(["model.num_classes=3"])
    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    fresh = _flat(model)
    report = load_weights(model, config, effdet_file, restore=restore)
    expected, ours = _flat(detector), _flat(model)
    if restore == "fitting":
        assert sorted(report.reinitialized) == ["head/class_predictor/pointwise/bias",
                                                "head/class_predictor/pointwise/kernel"]
    else:
        assert set(report.reinitialized) == {n for n in ours if n.startswith("head/")}
    for name in ours:
        want = fresh[name] if name in report.reinitialized else expected[name]
        np.testing.assert_array_equal(ours[name], want, err_msg=name)


def test_effdet_file_restores_the_backbone_alone(detector, effdet_file, build_fast):
    config = _config()
    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    fresh = _flat(model)
    report = load_weights(model, config, effdet_file, restore="classification")
    assert all(name.startswith("backbone/") for name in report.restored)
    expected, ours = _flat(detector), _flat(model)
    for name in ours:
        want = expected[name] if name.startswith("backbone/") else fresh[name]
        np.testing.assert_array_equal(ours[name], want, err_msg=name)
    assert len(report.restored) == sum(name.startswith("backbone/") for name in ours)
