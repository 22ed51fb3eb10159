"""A 3D U-Net run on volume files named by a listing (``data.*.type: volume_list``): NIfTI
and NumPy cases resampled to ``data.target_spacing`` train and evaluate; bad cases (a label
of another shape, of another spacing, labels outside ``model.num_classes``, a truncated
``.nii.gz``) are named, left out and counted while the rest trains; a listing with no usable
case is refused before anything compiles."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from jaxdet.config.loader import validate
from jaxdet.jobs import runs
from jaxdet.tasks.unet3d.volume_io import write_volume
from jaxdet.tasks.unet3d.volumes import generated_volume

pytestmark = pytest.mark.slow


def _raw(listing) -> dict:
    return {
        "name": "unet3d_files",
        "model": {"type": "unet3d", "num_classes": 3, "filters": [4, 8], "patch_size": [8, 8, 8],
                  "sliding_window": {"batch_size": 8}},
        "data": {"train": {"type": "volume_list", "listing": str(listing)},
                 "eval": {"type": "volume_list", "listing": str(listing), "split": "test"},
                 "target_spacing": [2.0, 1.0, 1.0], "intensity_clip": [-2.0, 4.0]},
        "train": {"batch_size": 2, "num_steps": 4, "log_every": 1, "checkpoint_every": 4,
                  "eval_every": 4, "optimizer": {"name": "adam"},
                  "learning_rate": {"name": "constant", "learning_rate": 0.01}},
        "eval": {"num_visualizations": 0},
        "parallel": {"data": 1},
    }


def _pair(folder, name, seed, *, suffix=".nii.gz", spacing=(1.0, 1.0, 1.0), label_shape=None,
          label_spacing=None, label_offset=0):
    image, label = generated_volume((seed, 0), (12, 12, 12))
    label = label + label_offset * (label > 0)
    if label_shape is not None:
        label = np.zeros(label_shape, np.int32)
    image_path = write_volume(folder / f"{name}{suffix}", image[..., 0], spacing)
    label_path = write_volume(folder / f"{name}_seg{suffix}", label, label_spacing or spacing)
    return {"image": image_path.name, "label": label_path.name}


def test_bad_cases_are_named_left_out_and_counted(tmp_path, caplog):
    good = [_pair(tmp_path, f"good{i}", i) for i in range(3)]
    good.append(_pair(tmp_path, "numpy", 3, suffix=".npy"))  # spacing 1 mm, as NumPy has none
    bad_shape = _pair(tmp_path, "shape", 4, label_shape=(12, 12, 11))
    bad_spacing = _pair(tmp_path, "spacing", 5, label_spacing=(1.0, 1.0, 2.0))
    bad_labels = _pair(tmp_path, "labels", 6, label_offset=5)  # classes 6 and 7 of 3
    truncated = _pair(tmp_path, "truncated", 7)
    data = (tmp_path / truncated["image"]).read_bytes()
    (tmp_path / truncated["image"]).write_bytes(data[: len(data) // 2])
    listing = tmp_path / "dataset.json"
    listing.write_text(json.dumps({
        "training": [bad_shape, *good, bad_spacing, bad_labels, truncated],
        "test": [good[0], bad_labels]}))
    config = validate(_raw(listing))
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        result = runs.train(config, tmp_path / "run", progress=False)
    assert result.step == 4
    warned = caplog.text
    for name in ("shape_seg.nii.gz", "spacing_seg.nii.gz", "labels", "truncated.nii.gz"):
        assert name in warned, name
    assert "differs from the image" in warned
    metrics = json.loads((tmp_path / "run" / "eval" / "step_4" / "metrics.json").read_text())
    assert metrics["num_cases"] == 1
    (skipped,) = metrics["skipped_cases"]
    assert skipped["file"].endswith("labels_seg.nii.gz") and "num_classes" in skipped["reason"]


def test_a_listing_without_usable_cases_is_refused_before_training(tmp_path):
    listing = tmp_path / "cases.csv"
    bad = _pair(tmp_path, "shape", 1, label_shape=(12, 12, 11))
    listing.write_text(f"image,label\n{bad['image']},{bad['label']}\n")
    with pytest.raises(ValueError, match="cases.csv") as e:
        runs.train(validate(_raw(listing)), tmp_path / "run", progress=False)
    assert "shape" in str(e.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran
    missing = validate(_raw(tmp_path / "nowhere.json"))
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        runs.train(missing, tmp_path / "run2", progress=False)
