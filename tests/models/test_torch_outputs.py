"""PyTorch weights loaded through the config path give the PyTorch model's outputs.

For every backbone jaxdet maps to torchvision / timm (ResNet-18 ... 152, MobileNet v1 / v2,
EfficientNet B0 ... B7) and every effdet EfficientDet (D1 ... D7; D0 has its own, fuller test
in test_effdet_equivalence.py): the state dict, written as a ``.safetensors`` file the way a
user has it (classifier included), is loaded into a detector built from a shipped config by
``weights.load_weights`` (what ``train.init_checkpoint``, ``--checkpoint`` and
``convert-checkpoint`` call), and jaxdet's features / raw head outputs equal what the torch
model computed with the same weights on the same input (fixtures/make_torch_outputs.py made
them offline; the weights are regenerated here from the stored key lists by the same rule)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.config.loader import load_config
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.weights import load_weights
from torch_weights import torch_deterministic_weights

FIXTURES = Path(__file__).parent / "fixtures"
TORCH_PYTORCH = ["model.backbone.padding=symmetric", "model.backbone.batch_norm.epsilon=1e-5"]

# (shipped config, overrides that build the backbone the PyTorch way, the classifier keys a
# downloaded file carries and load_weights reports unused)
BACKBONES = {
    **{f"resnet{d}": ("retinanet_resnet50_fpn_640", [
        f"model.backbone.name=resnet{d}", *TORCH_PYTORCH, "model.backbone.stride_in_1x1=false",
        "model.backbone.activation=relu"], {"fc.weight": (1000, 2048 if d >= 50 else 512)})
       for d in (18, 34, 50, 101, 152)},
    "mobilenetv1_100": ("ssd_mobilenet_v1_fpn_640", TORCH_PYTORCH,
                        {"classifier.weight": (1000, 1024)}),
    "mobilenetv2_100": ("ssd_mobilenet_v2_fpnlite_320", TORCH_PYTORCH,
                        {"classifier.weight": (1000, 1280)}),
    **{f"tf_efficientnet_b{b}": ("efficientdet_d0", [f"model.backbone.name=efficientnet_b{b}"],
                                 {"conv_head.weight": (1280, 320, 1, 1)})
       for b in range(8)},
}
# make test runs one of each family; the others (about 4 min more on two cores) run with
# ``pytest -m exhaustive tests/models/test_torch_outputs.py``
FAST = {"resnet18", "resnet50", "mobilenetv1_100", "mobilenetv2_100", "tf_efficientnet_b0"}


def _write_safetensors(path: Path, state: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(state, str(path))
    return path


def _write_pth(path: Path, state: dict[str, np.ndarray]) -> Path:
    """As torchvision publishes it: ``torch.save(model.state_dict())``."""
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
    return path


WRITERS = {"safetensors": _write_safetensors, "pth": _write_pth}


def _close(ours, expected, name: str) -> None:
    scale = float(np.abs(expected).max())
    assert scale > 1e-2, name  # a live signal
    np.testing.assert_allclose(np.asarray(ours), expected, rtol=0, atol=2e-4 * scale,
                               err_msg=name)


def _params(names, fast):
    return [pytest.param(n, marks=() if n in fast else pytest.mark.exhaustive) for n in names]


@pytest.mark.parametrize("name, suffix", [
    *[pytest.param(n, "safetensors", marks=() if n in FAST else pytest.mark.exhaustive)
      for n in BACKBONES], ("resnet18", "pth")])
@pytest.mark.slow
def test_backbone_file_gives_the_torch_features(name, suffix, build_fast, tmp_path):
    base, overrides, classifier = BACKBONES[name]
    config = load_config(base, [*overrides, "precision=fp32"])
    shapes = json.loads((FIXTURES / f"{name}.json").read_text())["shapes"]
    state = dict(torch_deterministic_weights(shapes))
    for key, shape in classifier.items():  # a downloaded classifier file carries its head
        state[key] = np.zeros(shape, np.float32)
    path = WRITERS[suffix](tmp_path / f"{name}.{suffix}", state)

    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    report = load_weights(model, config, path, restore="classification")
    assert len(report.restored) == len(shapes)
    assert report.unused == sorted(classifier) and report.reinitialized == []
    model.eval()
    ref = np.load(FIXTURES / "torch_backbone_outputs.npz")
    graphdef, state = nnx.split(model.backbone)
    features = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.asarray(ref["x"]))
    for level in (3, 4, 5):
        ours = np.asarray(features[level])
        ours = ours if level == 5 else ours[..., ::4]
        _close(ours, ref[f"{name}/level{level}"], f"{name} level {level}")


EFFDET = json.loads(gzip.decompress((FIXTURES / "effdet_shapes.json.gz").read_bytes()))
EFFDET_SIZE = 128


@pytest.mark.parametrize("variant", _params(range(1, 8), {1}))
@pytest.mark.slow
def test_effdet_file_gives_effdets_outputs(variant, build_fast, tmp_path):
    size = EFFDET_SIZE
    config = load_config(f"efficientdet_d{variant}", [
        "precision=fp32", f"data.resizer.min_dimension={size}",
        f"data.resizer.max_dimension={size}",
        f"data.augment=[{{name: random_scale_crop_and_pad_to_square, output_size: {size}}}]"])
    shapes = EFFDET["shapes"][f"tf_efficientdet_d{variant}"]
    path = _write_safetensors(tmp_path / "effdet.safetensors",
                              dict(torch_deterministic_weights(shapes)))
    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    report = load_weights(model, config, path)  # format auto (torch), restore full
    assert len(report.restored) == len(shapes) and report.unused == []
    model.eval()
    ref = np.load(FIXTURES / "effdet_outputs.npz")

    @jax.jit
    def run(state, x):
        m = nnx.merge(graphdef, state)
        return m.head(m.neck(m.backbone(x)))

    graphdef, state = nnx.split(model)
    class_logits, box_encodings = run(state, jnp.asarray(ref["input"]))
    for i, level in enumerate(range(3, 8)):
        key = f"d{variant}/{{}}_p{level}"
        logits = np.asarray(class_logits[i])
        _close(np.asarray(box_encodings[i])[:, ::7], ref[key.format("box")], f"box P{level}")
        _close(logits[:, ::7, :8], ref[key.format("class")], f"class P{level}")
        np.testing.assert_allclose(logits.mean(axis=1), ref[key.format("class_mean")],
                                   atol=2e-4)
        np.testing.assert_allclose(logits.std(axis=1), ref[key.format("class_std")],
                                   atol=2e-4)
