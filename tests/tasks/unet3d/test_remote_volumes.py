"""3D volumes and their listings in a bucket (the GCS emulator of tests/gcs_emulator.py) read
as the same files on local disk: headers from the first bytes, whole volumes in every format,
a Decathlon listing's relative paths resolved in the bucket, and the U-Net's data set built
from it; a missing volume is named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxdet.tasks.unet3d.volume_dataset import VolumeDataset
from jaxdet.tasks.unet3d.volume_io import (
    VolumeReadError,
    read_header,
    read_listing,
    read_volume,
    write_volume,
)
from jaxdet.tasks.unet3d.volumes import generated_volume

pytest.importorskip("nibabel")
SUFFIXES = (".nii.gz", ".nii", ".npz", ".npy")


@pytest.fixture(scope="module")
def volumes(gcs, tmp_path_factory):
    """Image and label volumes of every format, a listing beside them; on disk and in the
    bucket (``(local folder, bucket URL)``)."""
    local = tmp_path_factory.mktemp("volumes")
    image, label = generated_volume((3, 0), (12, 14, 16))
    training = []
    for k, suffix in enumerate(SUFFIXES):
        write_volume(local / "imagesTr" / f"case_{k}{suffix}", image[..., 0], (2.0, 1.5, 1.0))
        write_volume(local / "labelsTr" / f"case_{k}{suffix}", label, (2.0, 1.5, 1.0))
        training.append({"image": f"./imagesTr/case_{k}{suffix}",
                         "label": f"./labelsTr/case_{k}{suffix}"})
    (local / "dataset.json").write_text(json.dumps({"training": training}))
    return local, gcs.upload(local, "volumes/task")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_volume_in_a_bucket_reads_as_on_disk(volumes, suffix):
    local, remote = volumes
    for kind in ("imagesTr", "labelsTr"):
        name = f"{kind}/case_{SUFFIXES.index(suffix)}{suffix}"
        assert read_header(f"{remote}/{name}") == read_header(local / name)
        got, got_spacing = read_volume(f"{remote}/{name}")
        want, want_spacing = read_volume(local / name)
        assert got.dtype == want.dtype and got_spacing == want_spacing
        np.testing.assert_array_equal(got, want)


def test_a_listing_in_a_bucket_resolves_beside_it_and_feeds_the_data_set(volumes):
    local, remote = volumes
    records = read_listing(f"{remote}/dataset.json")
    assert [r["image"] for r in records] == [f"{remote}/imagesTr/case_{k}{s}"
                                             for k, s in enumerate(SUFFIXES)]
    kwargs = {"num_classes": 3, "target_spacing": (2.0, 2.0, 2.0), "cache": False}
    in_bucket = VolumeDataset.from_listing(f"{remote}/dataset.json", **kwargs)
    on_disk = VolumeDataset.from_listing(local / "dataset.json", **kwargs)
    assert len(in_bucket) == len(on_disk) == len(SUFFIXES) and not in_bucket.skipped
    for i in range(len(on_disk)):
        assert in_bucket.name(i) == on_disk.name(i)
        for got, want in zip(in_bucket[i], on_disk[i], strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_missing_volume_in_a_bucket_is_named(volumes):
    _, remote = volumes
    with pytest.raises(VolumeReadError, match=f"{remote}/imagesTr/absent.nii.gz: no such file"):
        read_volume(f"{remote}/imagesTr/absent.nii.gz")
    records = [{"image": f"{remote}/imagesTr/case_0.nii.gz",
                "label": f"{remote}/labelsTr/absent.nii.gz"},
               {"image": f"{remote}/imagesTr/case_1.nii", "label": f"{remote}/labelsTr/case_1.nii"}]
    dataset = VolumeDataset(records, num_classes=3, cache=False)
    assert len(dataset) == 1
    assert dataset.skipped == [(f"{remote}/labelsTr/absent.nii.gz",
                                "label of case_0.nii.gz: no such file")]
