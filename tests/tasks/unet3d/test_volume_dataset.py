"""VolumeDataset (header checks, preprocessing, bad labels) and VolumePatchLoader (order,
resume, shards, skipped cases, threads)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from jaxdet.tasks.unet3d.volume_dataset import VolumeDataset, VolumePatchLoader
from jaxdet.tasks.unet3d.volume_io import VolumeReadError, write_volume
from jaxdet.tasks.unet3d.volume_transforms import PatchAugment
from jaxdet.tasks.unet3d.volumes import GeneratedVolumes

SHAPE = (8, 10, 12)


def _case(folder, name, *, spacing=(2.0, 1.0, 1.0), value=1, label_shape=SHAPE,
          label_spacing=None, seed=0):
    """Image (noise + 100 * label) and label (a block of ``value`` at [2:5, 3:7, 4:9]) files."""
    label = np.zeros(label_shape, np.int32)
    label[2:5, 3:7, 4:9] = value
    label[0, 0, 0] = 1
    rng = np.random.default_rng(seed)
    image = rng.normal(size=SHAPE)
    image[2:5, 3:7, 4:9] += 100.0
    image_path = write_volume(folder / f"{name}.nii.gz", image.astype(np.float32), spacing)
    label_path = write_volume(folder / f"{name}_seg.nii.gz", label,
                              label_spacing or spacing)
    return {"image": str(image_path), "label": str(label_path)}


def _truncated(folder, name):
    record = _case(folder, name, seed=9)
    path = folder / f"{name}.nii.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return record


def test_dataset_reads_resampled_and_normalized_volumes(tmp_path):
    rec = _case(tmp_path, "a")
    ds = VolumeDataset([rec], num_classes=2, target_spacing=(1.0, 1.0, 1.0), clip=(-5.0, 50.0),
                       mean=10.0, std=4.0)
    assert len(ds) == 1 and ds.skipped == []
    assert ds.checked == {"listing": None, "total": 1, "kept": 1, "skipped": 0}
    assert ds.name(0) == "a.nii.gz" and ds.image_path(0) == rec["image"]
    assert ds.spacing(0) == (2.0, 1.0, 1.0)  # the original one
    image, label = ds[0]
    assert image.shape == (16, 10, 12, 1) and image.dtype == np.float32
    assert label.shape == (16, 10, 12) and label.dtype == np.int32
    zs, ys, xs = np.nonzero(label[:, 3:])  # leave the corner voxel out
    assert (zs.min(), zs.max() + 1, ys.min() + 3, ys.max() + 4) == (4, 10, 3, 7)
    assert label[0, 0, 0] == label[1, 0, 0] == 1 and label[2, 0, 0] == 0
    # block voxels were ~100 -> clipped to 50 -> (50 - 10) / 4 = 10
    np.testing.assert_allclose(image[5:9, 4:6, 5:8], 10.0)
    assert image.max() == 10.0 and image.min() >= (-5.0 - 10.0) / 4.0
    assert ds[0][0] is image  # cached
    assert ds[-1][0] is image
    with pytest.raises(IndexError):
        ds[1]


def test_dataset_drops_bad_pairs_from_headers(tmp_path, caplog):
    good = _case(tmp_path, "good")
    shape = _case(tmp_path, "shape", label_shape=(8, 10, 11))
    spacing = _case(tmp_path, "spacing", label_spacing=(2.0, 1.0, 1.5))
    missing = dict(_case(tmp_path, "missing"), label=str(tmp_path / "nope.nii.gz"))
    unlabelled = {"image": good["image"], "label": None}
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        ds = VolumeDataset([shape, good, spacing, missing, unlabelled], num_classes=2,
                           listing="cases.json")
    assert len(ds) == 1 and ds.name(0) == "good.nii.gz"
    files = [f for f, _ in ds.skipped]
    assert files == [shape["label"], spacing["label"], str(tmp_path / "nope.nii.gz"),
                     good["image"]]
    reasons = [r for _, r in ds.skipped]
    assert "label shape (8, 10, 11) differs from the image's (8, 10, 12)" in reasons[0]
    assert "label spacing (2.0, 1.0, 1.5) differs" in reasons[1]
    assert "no such file" in reasons[2] and reasons[3] == "no label given"
    assert ds.checked == {"listing": "cases.json", "total": 5, "kept": 1, "skipped": 4}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "4 of 5 cases dropped" in warnings[0].getMessage()

    # a spacing difference under 1e-3 relative is the same spacing
    close = _case(tmp_path, "close", label_spacing=(2.0005, 1.0, 1.0))
    assert len(VolumeDataset([close], num_classes=2)) == 1
    # without labels required, an unlabelled case reads as (image, None)
    ds = VolumeDataset([unlabelled], num_classes=2, require_labels=False)
    image, label = ds[0]
    assert image.shape == (*SHAPE, 1) and label is None

    with pytest.raises(ValueError, match=r"cases\.json: no usable case.*shape\.nii"):
        VolumeDataset([shape, missing], num_classes=2, listing="cases.json")


def test_labels_outside_num_classes_raise_at_read(tmp_path):
    rec = _case(tmp_path, "five", value=5)
    ds = VolumeDataset([rec], num_classes=3)  # headers are fine
    with pytest.raises(VolumeReadError, match=r"five_seg\.nii\.gz.*outside \[0, 3\).*5 \(60 "
                                              r"voxels\)") as info:
        ds[0]
    assert info.value.path == rec["label"]
    with pytest.raises(VolumeReadError):  # remembered
        ds[0]


def test_from_listing_and_truncated_image_at_read(tmp_path):
    a = _case(tmp_path, "a")
    _truncated(tmp_path, "cut")
    (tmp_path / "cases.csv").write_text("image,label\na.nii.gz,a_seg.nii.gz\n"
                                        "cut.nii.gz,cut_seg.nii.gz\n")
    ds = VolumeDataset.from_listing(tmp_path / "cases.csv", num_classes=2)
    assert len(ds) == 2 and ds.image_path(0) == a["image"]  # the header is still readable
    with pytest.raises(VolumeReadError, match=r"cut\.nii\.gz"):
        ds[1]


def _generated_loader(**kwargs):
    source = GeneratedVolumes(num_volumes=5, shape=(12, 12, 12), seed=1)
    options = dict(patch_size=(8, 8, 8), batch_size=4, seed=3,
                   augment=PatchAugment(brightness_probability=0.5, noise_probability=0.5))
    options.update(kwargs)
    return VolumePatchLoader(source, **options)


def _same(a, b):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["labels"], b["labels"])


def test_loader_is_deterministic_and_resumes_exactly():
    first = _generated_loader()
    batches = [next(first) for _ in range(3)]
    assert batches[0]["images"].shape == (4, 8, 8, 8, 1)
    assert batches[0]["images"].dtype == np.float32 and batches[0]["labels"].dtype == np.int32
    again = _generated_loader()
    _same(batches[2], [next(again) for _ in range(3)][2])
    assert not np.array_equal(batches[0]["images"], next(_generated_loader(seed=4))["images"])
    assert not np.array_equal(batches[0]["images"], batches[1]["images"])

    interrupted = _generated_loader()
    next(interrupted), next(interrupted)
    state = json.loads(json.dumps(interrupted.get_state()))
    assert state["step"] == 2
    restored = _generated_loader()
    restored.set_state(state)
    _same(next(restored), batches[2])
    with pytest.raises(ValueError, match="seed=3.*seed=4"):
        _generated_loader(seed=4).set_state(state)
    with pytest.raises(ValueError, match="batch_size"):
        _generated_loader(batch_size=2).set_state(state)


def test_loader_epoch_order_and_shards():
    whole = _generated_loader(batch_size=4)
    shards = [_generated_loader(batch_size=4, shard_index=i, shard_count=2) for i in range(2)]
    for _ in range(3):
        batch = next(whole)
        parts = [next(s) for s in shards]
        assert parts[0]["images"].shape == (2, 8, 8, 8, 1)
        _same(batch, {k: np.concatenate([p[k] for p in parts]) for k in batch})
    # each epoch of 5 cases is a permutation of all of them
    order = [whole.case_index(k) for k in range(10)]
    assert sorted(order[:5]) == sorted(order[5:]) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="split evenly"):
        _generated_loader(batch_size=3, shard_count=2)


def _file_dataset(tmp_path, bad=True):
    records = [_case(tmp_path, f"c{i}", seed=i) for i in range(3)]
    if bad:
        records.insert(1, _truncated(tmp_path, "cut"))
    return VolumeDataset(records, num_classes=2, clip=(-3.0, 103.0), mean=50.0, std=50.0)


def test_loader_skips_and_counts_a_truncated_file(tmp_path, caplog):
    ds = _file_dataset(tmp_path)
    augment = PatchAugment(foreground_probability=0.5)
    loader = VolumePatchLoader(ds, patch_size=(6, 8, 8), batch_size=4, augment=augment, seed=0)
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        batches = [next(loader) for _ in range(3)]  # every case is read in every step
    cut = str(tmp_path / "cut.nii.gz")
    assert list(loader.skipped) == [cut] and loader.skipped[cut]  # file -> reason
    assert loader.num_replaced == 3  # once per epoch of 4 cases
    logged = [r.getMessage() for r in caplog.records if "cut.nii.gz" in r.getMessage()]
    assert len(logged) == 1 and "skipping case 1" in logged[0]
    for batch in batches:
        assert batch["images"].shape == (4, 6, 8, 8, 1)
        assert set(np.unique(batch["labels"])) <= {0, 1}

    # worker threads change nothing, skipped cases included
    threaded = VolumePatchLoader(_file_dataset(tmp_path), patch_size=(6, 8, 8), batch_size=4,
                                 augment=augment, seed=0, worker_count=2)
    for batch in batches:
        _same(batch, next(threaded))
    threaded.close()
    assert set(threaded.skipped) == {cut}


def test_loader_raises_when_no_case_can_be_read(tmp_path):
    ds = VolumeDataset([_truncated(tmp_path, "x"), _truncated(tmp_path, "y")], num_classes=2)
    loader = VolumePatchLoader(ds, patch_size=(4, 4, 4), batch_size=1, augment=PatchAugment(),
                               seed=0)
    with pytest.raises(RuntimeError, match=r"none of the 2 volumes can be read.*\.nii\.gz"):
        next(loader)


def test_threads_give_identical_batches_on_generated_volumes():
    plain, threaded = _generated_loader(), _generated_loader(worker_count=2)
    for _ in range(3):
        _same(next(plain), next(threaded))
    threaded.close()
