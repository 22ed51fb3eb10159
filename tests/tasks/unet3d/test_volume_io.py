"""Volume files (NIfTI, npy, npz) and listings: round trips, corrupt files, listings."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from jaxdet.tasks.unet3d.volume_io import (
    VolumeReadError,
    read_header,
    read_listing,
    read_volume,
    storage_dtype,
    write_volume,
)

SHAPE = (8, 10, 12)


def _image():
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 7.0 - 3.0


def _label():
    label = np.zeros(SHAPE, np.int32)
    label[2:5, 3:7, 4:9] = 1
    label[6, 8, 10] = 2
    return label


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".npz", ".npy"])
def test_round_trip_keeps_array_and_spacing(tmp_path, suffix):
    spacing = (2.5, 0.75, 0.8)
    for name, array in (("image", _image()), ("label", _label())):
        path = write_volume(tmp_path / f"{name}{suffix}", array, spacing)
        back, vox = read_volume(path)
        np.testing.assert_array_equal(back, array)
        assert back.shape == SHAPE
        expect = (1.0, 1.0, 1.0) if suffix == ".npy" else spacing  # npy stores no spacing
        np.testing.assert_allclose(vox, expect, rtol=1e-6)
        shape, hvox = read_header(path)
        assert shape == SHAPE
        np.testing.assert_allclose(hvox, expect, rtol=1e-6)
    # labels are stored narrow; the caller's spacing fills in for npy
    back, vox = read_volume(tmp_path / f"label{suffix}", spacing=(3, 2, 1))
    assert back.dtype == np.uint8
    if suffix == ".npy":
        assert vox == (3.0, 2.0, 1.0)


def test_storage_dtype():
    assert storage_dtype(np.array([0, 255])) == np.uint8
    assert storage_dtype(np.array([-1, 3])) == np.int16
    assert storage_dtype(np.array([0, 40000])) == np.int32
    assert storage_dtype(np.array([True])) == np.uint8
    assert storage_dtype(np.array([0.5], np.float64)) == np.float32


def test_nifti_four_axes_are_channels_last(tmp_path):
    data = np.stack([_image(), -_image()], axis=-1)  # [8, 10, 12, 2]
    nib.save(nib.Nifti1Image(data, np.diag([1.5, 2.0, 3.0, 1.0])), tmp_path / "two.nii.gz")
    back, vox = read_volume(tmp_path / "two.nii.gz")
    assert back.shape == (*SHAPE, 2)
    np.testing.assert_array_equal(back[..., 1], -_image())
    assert vox == (1.5, 2.0, 3.0)
    assert read_header(tmp_path / "two.nii.gz")[0] == (*SHAPE, 2)


def test_write_like_reuses_affine_and_header(tmp_path):
    affine = np.array([[0, 0, -0.8, 10.0], [0, -0.7, 0, 20.0], [3.0, 0, 0, -5.0], [0, 0, 0, 1]])
    ref = nib.Nifti1Image(_image().astype(np.int16), affine)
    ref.header.set_slope_inter(2.0, -1024.0)  # CT-like scaling must not leak into labels
    ref.header["descrip"] = b"kits case"
    nib.save(ref, tmp_path / "ref.nii.gz")
    ref_zooms = nib.load(tmp_path / "ref.nii.gz").header.get_zooms()[:3]

    out = write_volume(tmp_path / "pred.nii.gz", _label(), ref_zooms, like=tmp_path / "ref.nii.gz")
    img = nib.load(out)
    np.testing.assert_allclose(img.affine, affine, atol=1e-5)
    assert img.header["descrip"].tobytes().startswith(b"kits case")
    assert img.get_data_dtype() == np.uint8
    np.testing.assert_array_equal(np.asanyarray(img.dataobj), _label())

    # another spacing: same orientation and origin, columns rescaled
    write_volume(tmp_path / "half.nii.gz", _label(), (1.5, 0.35, 0.4), like=tmp_path / "ref.nii.gz")
    half = nib.load(tmp_path / "half.nii.gz")
    expect = affine.copy()
    expect[:3, :3] *= np.array([0.5, 0.5, 0.5])
    np.testing.assert_allclose(half.affine, expect, atol=1e-5)
    np.testing.assert_allclose(half.header.get_zooms()[:3], (1.5, 0.35, 0.4), rtol=1e-6)


def test_truncated_nifti_is_a_read_error_naming_the_file(tmp_path):
    path = write_volume(tmp_path / "case.nii.gz", np.random.default_rng(0).normal(
        size=(16, 20, 24)).astype(np.float32), (1, 1, 1))
    data = path.read_bytes()
    bad = tmp_path / "bad.nii.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(VolumeReadError, match="bad.nii.gz") as info:
        read_volume(bad)
    assert info.value.path == str(bad)


def test_missing_file_wrong_extension_and_bad_npz(tmp_path):
    with pytest.raises(VolumeReadError, match=r"nope\.nii\.gz: no such file"):
        read_volume(tmp_path / "nope.nii.gz")
    (tmp_path / "x.mha").write_bytes(b"1234")
    with pytest.raises(VolumeReadError, match=r"x\.mha: unknown extension"):
        read_header(tmp_path / "x.mha")
    np.savez(tmp_path / "two.npz", a=_image(), b=_image())
    with pytest.raises(VolumeReadError, match=r"two\.npz.*\['a', 'b'\]"):
        read_volume(tmp_path / "two.npz")
    np.save(tmp_path / "flat.npy", np.zeros((4, 5)))
    with pytest.raises(VolumeReadError, match=r"flat\.npy.*shape \(4, 5\)"):
        read_volume(tmp_path / "flat.npy")
    np.save(tmp_path / "cut.npy", _image())
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:300])
    with pytest.raises(VolumeReadError, match=r"cut\.npy"):
        read_volume(tmp_path / "cut.npy")


def test_npz_only_array_and_spacing_key(tmp_path):
    np.savez(tmp_path / "v.npz", volume=_image(), spacing=np.array([4.0, 2.0, 1.0]))
    back, vox = read_volume(tmp_path / "v.npz")
    np.testing.assert_array_equal(back, _image())
    assert vox == (4.0, 2.0, 1.0)
    assert read_header(tmp_path / "v.npz") == (SHAPE, (4.0, 2.0, 1.0))


def test_json_listing_decathlon_and_plain_list(tmp_path):
    sub = tmp_path / "task"
    sub.mkdir()
    (sub / "dataset.json").write_text(json.dumps({
        "name": "KiTS",
        "training": [{"image": "./imagesTr/a.nii.gz", "label": "./labelsTr/a.nii.gz"},
                     {"image": "/abs/b.nii.gz", "label": "labelsTr/b.nii.gz", "id": 7}],
        "test": ["./imagesTs/c.nii.gz"],
    }))
    records = read_listing(sub / "dataset.json")
    assert records == [
        {"image": str(sub / "imagesTr/a.nii.gz"), "label": str(sub / "labelsTr/a.nii.gz")},
        {"image": "/abs/b.nii.gz", "label": str(sub / "labelsTr/b.nii.gz"), "id": 7},
    ]
    assert read_listing(sub / "dataset.json", split="test") == [
        {"image": str(sub / "imagesTs/c.nii.gz"), "label": None}]
    with pytest.raises(ValueError, match=r"dataset\.json: no split 'validation'.*'test'"):
        read_listing(sub / "dataset.json", split="validation")

    (tmp_path / "list.json").write_text(json.dumps([{"image": "i.npy", "label": None},
                                                    {"label": "l.npy"}]))
    with pytest.raises(ValueError, match=r"list\.json, record \[1\]"):
        read_listing(tmp_path / "list.json")


def test_csv_listing_comments_header_and_errors(tmp_path):
    (tmp_path / "cases.csv").write_text(
        "# KiTS subset\nimage,label\n\nimg/a.nii.gz, lab/a.nii.gz\n/data/b.npy\n")
    assert read_listing(tmp_path / "cases.csv") == [
        {"image": str(tmp_path / "img/a.nii.gz"), "label": str(tmp_path / "lab/a.nii.gz")},
        {"image": "/data/b.npy", "label": None},
    ]
    (tmp_path / "bad.txt").write_text("a.npy,b.npy\na.npy,b.npy,c.npy\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 2"):
        read_listing(tmp_path / "bad.txt")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_listing(tmp_path / "missing.csv")
