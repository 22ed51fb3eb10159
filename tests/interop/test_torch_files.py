"""PyTorch weight files: ``.safetensors`` read without torch (checked against the reference
``safetensors`` library), pickles refused clearly when torch is absent, and a torchvision
ResNet-50 classifier state dict restored as a detector's backbone (``restore:
classification``). effdet whole-detector files: tests/tasks/ssd/test_effdet_equivalence.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from jaxdet.config.loader import load_config
from jaxdet.interop.formats import detect_format
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.torch_files import TorchFileError, read_safetensors, read_torch_weights
from jaxdet.interop.torch_names import to_ours
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.weights import load_weights

safetensors_numpy = pytest.importorskip("safetensors.numpy")
RESNET50 = json.loads((Path(__file__).parents[1] / "models" / "fixtures" / "resnet50.json"
                       ).read_text())


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "half": rng.standard_normal((5,)).astype(np.float16),
        "brain": rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16),
        "bn.num_batches_tracked": np.array(12, np.int64),
        "mask": np.array([True, False, True]),
        "ids": np.arange(6, dtype=np.uint8).reshape(2, 3),
        "empty": np.zeros((0, 4), np.float32),
    }


def test_safetensors_reader_matches_the_reference_library(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors_numpy.save_file(_tensors(), str(path), metadata={"format": "pt"})
    ours, reference = read_safetensors(path), safetensors_numpy.load_file(str(path))
    assert set(ours) == set(reference) == set(_tensors())  # __metadata__ is not a tensor
    for key, value in reference.items():
        assert ours[key].dtype == value.dtype and ours[key].shape == value.shape, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    assert read_torch_weights(path).keys() == ours.keys()
    assert detect_format(path) == "torch"


def test_truncated_or_foreign_files_are_named(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors_numpy.save_file(_tensors(), str(path))
    data = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-10])
    with pytest.raises(TorchFileError, match=r"cut\.safetensors: tensor '.*' needs bytes.*"
                                             r"truncated or corrupt"):
        read_safetensors(cut)
    text = tmp_path / "notes.safetensors"
    text.write_bytes(b"hello world, not weights at all")
    with pytest.raises(TorchFileError, match=r"notes\.safetensors: header of \d+ bytes runs "
                                             r"past the end"):
        read_safetensors(text)
    with pytest.raises(TorchFileError, match="not a weight file jaxdet knows"):
        read_torch_weights(_write(tmp_path / "w.npy", b"x"))
    with pytest.raises(FileNotFoundError, match="weight file not found"):
        read_torch_weights(tmp_path / "missing.safetensors")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_pickle_without_torch_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if PyTorch were not installed
    path = _write(tmp_path / "resnet50.pth", b"\x80\x02}q\x00.")
    with pytest.raises(TorchFileError, match=r"resnet50\.pth is a pickle, which jaxdet never "
                                             r"unpickles itself; install PyTorch .* or convert "
                                             r"it to \.safetensors"):
        read_torch_weights(path)


class _Payload:
    """What a malicious pickle does on load: here, create a file (``__reduce__`` makes the
    unpickler call ``Path.touch``)."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_pth_written_by_torch_reads_like_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    state = {"conv1.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "bn1.num_batches_tracked": np.array(5, np.int64)}
    path = tmp_path / "w.pth"
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, path)
    wrapped = tmp_path / "wrapped.pth"  # a training script's {"state_dict": ...}
    torch.save({"state_dict": {k: torch.from_numpy(v) for k, v in state.items()}}, wrapped)
    for file in (path, wrapped):
        got = read_torch_weights(file)
        assert got.keys() == state.keys()
        for k, v in state.items():
            np.testing.assert_array_equal(got[k], v)


def test_pth_that_needs_arbitrary_unpickling_is_refused_and_runs_nothing(tmp_path):
    """torch.load(weights_only=True) refuses any global outside tensors and containers: the
    payload never runs, the error names the file, the model is untouched."""
    torch = pytest.importorskip("torch")
    marker = tmp_path / "payload_ran"
    path = tmp_path / "resnet50.pth"
    torch.save({"conv1.weight": torch.zeros(64, 3, 7, 7), "evil": _Payload(marker)}, path)
    assert not marker.exists()
    config = load_config("retinanet_resnet50_fpn_640", ["model.backbone.padding=symmetric"])
    model = _zeros(config)
    with pytest.raises(TorchFileError) as info:
        load_weights(model, config, path, restore="classification")
    message = str(info.value)
    assert message.startswith(f"{path}: torch.load(weights_only=True) refused it (it needs "
                              "the Python object ")
    assert "does not load pickles that need arbitrary code" in message
    assert "\n" not in message and "\x1b" not in message  # one line, no terminal colours
    assert not marker.exists()
    params = nnx.state(model, nnx.Param)
    assert all(not np.any(np.asarray(v)) for _, v in nnx.to_flat_state(params))


def _zeros(config) -> nnx.Module:
    """The detector with every parameter and statistic zero (built abstractly: no compile)."""
    graphdef, state = nnx.split(abstract_build(lambda: ssd_build.build_model(config)))
    for _, var in nnx.to_flat_state(state):
        if isinstance(var, nnx.RngKey):
            var.set_value(jax.random.key(0))
        else:
            var.set_value(jnp.zeros(var.shape, var.dtype))
    return nnx.merge(graphdef, state)


@pytest.fixture(scope="module")
def torchvision_resnet50(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A torchvision ``resnet50`` state dict (its real keys and shapes, the classifier's
    ``fc`` included) with distinct values, as a ``.safetensors`` file."""
    rng = np.random.default_rng(3)
    shapes = {**RESNET50["shapes"], "fc.weight": [1000, 2048], "fc.bias": [1000]}
    state = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    path = tmp_path_factory.mktemp("tv") / "resnet50.safetensors"
    safetensors_numpy.save_file(state, str(path))
    return path, state


@pytest.mark.slow
def test_torchvision_resnet50_restores_the_backbone(torchvision_resnet50):
    path, state = torchvision_resnet50
    config = load_config("retinanet_resnet50_fpn_640", [
        "model.backbone.padding=symmetric", "model.backbone.stride_in_1x1=false",
        "model.backbone.activation=relu"])
    model = _zeros(config)
    report = load_weights(model, config, path, restore="classification")
    assert report.unused == ["fc.bias", "fc.weight"] and report.reinitialized == []
    assert len(report.restored) == len(RESNET50["shapes"])
    backbone = model.backbone
    np.testing.assert_array_equal(backbone.conv1.kernel[...],
                                  to_ours("conv", state["conv1.weight"]))
    np.testing.assert_array_equal(backbone.layer3[5].bn2.var[...],
                                  state["layer3.5.bn2.running_var"])
    np.testing.assert_array_equal(backbone.layer4[0].downsample[0].kernel[...],
                                  to_ours("conv", state["layer4.0.downsample.0.weight"]))
    neck = nnx.state(model.neck, nnx.Param)
    assert all(not np.any(np.asarray(v)) for _, v in nnx.to_flat_state(neck))  # untouched

    with pytest.raises(CheckpointError, match="holds a backbone .* restore: classification"):
        load_weights(_zeros(config), config, path, restore="detection")
    small = load_config("shapes_demo")  # a ResNet-18 at a quarter width: the same key names
    with pytest.raises(CheckpointError, match=r"resnet50\.safetensors: bn1\.weight has shape "
                                              r"\(64,\) .* but backbone/bn1/scale is \(16,\)"):
        load_weights(_zeros(small), small, path, restore="classification")
    other = load_config("efficientdet_d0")  # timm's EfficientNet names: none of them there
    with pytest.raises(CheckpointError, match=r"does not fit this model: 300 of the 304 tensors "
                                              r"it needs are not in the file, e\.g\. blocks"):
        load_weights(_zeros(other), other, path, restore="classification")
