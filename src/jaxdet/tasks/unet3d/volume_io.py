"""Reading and writing 3D volumes (NIfTI, .npy, .npz) and data set listings.

Axis convention: arrays keep the axes as the file stores them, called (D, H, W) here (for a
KiTS19 case: slices, rows, columns); a 4th axis holds channels and comes last, so an image is
[D, H, W] or [D, H, W, C]. ``spacing`` is the voxel size (mm) along (D, H, W).

Formats:
  * ``.nii`` / ``.nii.gz`` through nibabel: spacing = the header's zooms of the first 3 axes.
    Headers load lazily, so :func:`read_header` reads no voxels.
  * ``.npy``: spacing (1, 1, 1) unless the caller gives one.
  * ``.npz``: the array under ``image`` or ``label`` (or the only array), and an optional
    ``spacing`` array of 3 floats.

Volumes and listings may sit in a remote store (``gs://bucket/kits19/case_00000.nii.gz``,
through :mod:`jaxdet.files`): a header is read from the first bytes of the file (the first
decompressed bytes of a ``.nii.gz``, the members' headers of an ``.npz``), a volume is fetched
whole (it is read whole anyway), and a listing's relative paths resolve beside it in the store.
Volumes are written to local files (a remote output folder is staged by the command).

Every failure to read a volume (missing, truncated or corrupt file, unknown extension, not a
3D array) is a :class:`VolumeReadError` naming the file and the reason.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet import files

Spacing = tuple[float, float, float]
NIFTI_SUFFIXES = (".nii", ".nii.gz")
SUFFIXES = (*NIFTI_SUFFIXES, ".npy", ".npz")


class VolumeReadError(ValueError):
    """A volume file that cannot be read; ``.path`` is the file, ``.reason`` why."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot read volume {self.path}: {reason}")


def volume_format(path: str | Path) -> str:
    """``"nifti"``, ``"npy"`` or ``"npz"`` from the file name; VolumeReadError otherwise."""
    name = str(path).lower()
    if name.endswith(NIFTI_SUFFIXES):
        return "nifti"
    if name.endswith(".npy"):
        return "npy"
    if name.endswith(".npz"):
        return "npz"
    raise VolumeReadError(path, f"unknown extension; expected one of {', '.join(SUFFIXES)}")


def _spacing3(values: Any, path: str | Path) -> Spacing:
    vals = [float(v) for v in np.asarray(values, np.float64).reshape(-1)]
    if len(vals) < 3 or not all(np.isfinite(v) and v > 0 for v in vals[:3]):
        raise VolumeReadError(path, f"spacing must be 3 positive numbers, got {vals}")
    return (vals[0], vals[1], vals[2])


def _check_shape(shape: Sequence[int], path: str | Path) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (3, 4):
        raise VolumeReadError(path, f"expected a 3D volume [D, H, W] or [D, H, W, C], got "
                                    f"shape {shape}")
    return shape


NIFTI2_HEADER_BYTES = 540  # a NIfTI-1 header is 348 bytes, both say which in their first 4


def _nifti_class(head: bytes) -> Any:
    """The nibabel image class of a NIfTI file whose first bytes are ``head``."""
    import nibabel as nib

    sizes = {int.from_bytes(head[:4], order) for order in ("little", "big")}
    return nib.Nifti2Image if NIFTI2_HEADER_BYTES in sizes else nib.Nifti1Image


def _nifti(path: str | Path) -> Any:
    """The nibabel image of a NIfTI file; a remote one is fetched into memory first."""
    import nibabel as nib

    try:
        if not files.is_url(path):
            return nib.load(str(path))
        data = files.read_bytes(path)
        if str(path).lower().endswith(".gz"):
            data = gzip.decompress(data)
        return _nifti_class(data).from_bytes(data)
    except Exception as e:  # noqa: BLE001 - nibabel raises many kinds; report them all alike
        raise VolumeReadError(path, f"not a readable NIfTI file ({type(e).__name__}: {e})") from e


def _remote_nifti_header(path: str) -> tuple[tuple[int, ...], Spacing]:
    """(shape, spacing) from the first bytes of a remote NIfTI file (decompressed as they
    stream for a ``.nii.gz``): no voxel is fetched beyond the first block."""
    try:
        with files.open_file(path, block_size=1 << 16) as raw:
            stream = gzip.GzipFile(fileobj=raw) if path.lower().endswith(".gz") else raw
            head = stream.read(NIFTI2_HEADER_BYTES)
        header = _nifti_class(head).header_class.from_fileobj(io.BytesIO(head))
    except Exception as e:  # noqa: BLE001 - truncated / foreign files fail in many ways
        raise VolumeReadError(path, f"not a readable NIfTI file ({type(e).__name__}: {e})") from e
    shape = _squeeze_time(tuple(int(s) for s in header.get_data_shape()), path)
    return shape, _spacing3(header.get_zooms()[:3], path)


def _nifti_shape(img: Any, path: str | Path) -> tuple[int, ...]:
    return _squeeze_time(tuple(int(s) for s in img.shape), path)


def _squeeze_time(shape: tuple[int, ...], path: str | Path) -> tuple[int, ...]:
    # (x, y, z, 1, c) as some tools write vector images: drop the singleton time axis
    while len(shape) > 4 and 1 in shape[3:]:
        axis = 3 + shape[3:].index(1)
        shape = shape[:axis] + shape[axis + 1:]
    return _check_shape(shape, path)


def _npz_key(names: Sequence[str], path: Path) -> str:
    arrays = [n for n in names if n != "spacing"]
    for key in ("image", "label"):
        if key in arrays:
            return key
    if len(arrays) == 1:
        return arrays[0]
    raise VolumeReadError(path, f"npz holds arrays {sorted(arrays)}; expected one named "
                                "'image' or 'label', or a single array")


def _exists(path: str | Path) -> None:
    if not files.isfile(path):
        raise VolumeReadError(path, "no such file")


def _as_path(path: str | os.PathLike) -> str | Path:
    """A local path as a ``Path``; a URL kept as its string."""
    return os.fspath(path) if files.is_url(path) else Path(path)


def _opened(path: str | Path) -> Any:
    """What numpy and zipfile read: the local path, or a remote file fetched into memory."""
    return io.BytesIO(files.read_bytes(path)) if files.is_url(path) else path


def read_header(path: str | Path, *, spacing: Sequence[float] | None = None
                ) -> tuple[tuple[int, ...], Spacing]:
    """(shape, spacing) of a volume without reading its voxels (NIfTI header, .npy header,
    .npz member header).

    ``shape`` is (D, H, W) or (D, H, W, C); ``spacing`` (mm along D, H, W) comes from the file
    when it holds one, else from ``spacing``, else (1, 1, 1). Raises VolumeReadError.
    """
    path = _as_path(path)
    kind = volume_format(path)
    _exists(path)
    remote = files.is_url(path)
    try:
        if kind == "nifti":
            if remote:
                return _remote_nifti_header(path)
            img = _nifti(path)
            shape = _nifti_shape(img, path)
            return shape, _spacing3(img.header.get_zooms()[:3], path)
        if kind == "npy":
            if remote:
                with files.open_file(path, block_size=1 << 16) as f:
                    shape = _npy_shape(f)
                return _check_shape(shape, path), _default_spacing(spacing, path)
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            return _check_shape(arr.shape, path), _default_spacing(spacing, path)
        stream = (files.open_file(path, block_size=1 << 16) if remote
                  else contextlib.nullcontext(path))
        with stream as source, zipfile.ZipFile(source) as zf:  # the remote file closed too
            names = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
            key = _npz_key(names, path)
            with zf.open(key + ".npy") as f:
                shape = _npy_shape(f)
            file_spacing = None
            if "spacing" in names:
                with zf.open("spacing.npy") as f:
                    file_spacing = np.lib.format.read_array(io.BytesIO(f.read()))
        return _check_shape(shape, path), (_spacing3(file_spacing, path) if file_spacing
                                           is not None else _default_spacing(spacing, path))
    except VolumeReadError:
        raise
    except Exception as e:  # noqa: BLE001 - truncated / corrupt files fail in many ways
        raise VolumeReadError(path, f"{type(e).__name__}: {e}") from e


def _npy_shape(stream: Any) -> tuple[int, ...]:
    """The shape in the header of the ``.npy`` data ``stream`` is at the start of."""
    version = np.lib.format.read_magic(stream)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    return read(stream)[0]


def _default_spacing(spacing: Sequence[float] | None, path: Path) -> Spacing:
    return (1.0, 1.0, 1.0) if spacing is None else _spacing3(spacing, path)


def read_volume(path: str | Path, *, spacing: Sequence[float] | None = None,
                dtype: Any = None) -> tuple[np.ndarray, Spacing]:
    """(array [D, H, W] or [D, H, W, C], spacing) of a volume file.

    The array has the stored dtype (NIfTI scaling applied: scaled data comes out float), or
    ``dtype`` when given. ``spacing`` is used for files that hold none (.npy, .npz without a
    ``spacing`` key); default (1, 1, 1). Raises VolumeReadError naming the file (missing,
    truncated or corrupt, unknown extension, not 3D / 4D).
    """
    path = _as_path(path)
    kind = volume_format(path)
    _exists(path)
    try:
        if kind == "nifti":
            img = _nifti(path)
            shape = _nifti_shape(img, path)
            if dtype is not None and np.issubdtype(np.dtype(dtype), np.floating):
                array = img.get_fdata(dtype=np.dtype(dtype))
            else:
                array = np.asanyarray(img.dataobj)
            array = np.asarray(array).reshape(shape)
            vox = _spacing3(img.header.get_zooms()[:3], path)
        elif kind == "npy":
            array = np.load(_opened(path), allow_pickle=False)
            vox = _default_spacing(spacing, path)
        else:
            with np.load(_opened(path), allow_pickle=False) as data:
                array = data[_npz_key(list(data.files), path)]
                vox = (_spacing3(data["spacing"], path) if "spacing" in data.files
                       else _default_spacing(spacing, path))
    except VolumeReadError:
        raise
    except Exception as e:  # noqa: BLE001 - truncated / corrupt files fail in many ways
        raise VolumeReadError(path, f"{type(e).__name__}: {e}") from e
    _check_shape(array.shape, path)
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    return array, vox


def storage_dtype(array: np.ndarray) -> np.dtype:
    """The dtype a volume is written with: integer / bool data (labels) as the smallest of
    uint8, int16, int32 that holds its values; floating data as float32."""
    if array.dtype == bool:
        return np.dtype(np.uint8)
    if np.issubdtype(array.dtype, np.integer):
        lo, hi = (int(array.min()), int(array.max())) if array.size else (0, 0)
        if lo >= 0 and hi <= 255:
            return np.dtype(np.uint8)
        if lo >= -32768 and hi <= 32767:
            return np.dtype(np.int16)
        return np.dtype(np.int32)
    return np.dtype(np.float32)


def write_volume(path: str | Path, array: np.ndarray, spacing: Sequence[float], *,
                 like: str | Path | None = None) -> Path:
    """Write ``array`` [D, H, W] or [D, H, W, C] with voxel ``spacing`` (mm along D, H, W).

    ``.nii`` / ``.nii.gz``: when ``like`` is a NIfTI file, its header and affine are reused
    (orientation and origin kept, voxel size set to ``spacing``), so the output lines up with
    that file in viewers; otherwise the affine is diag(spacing). ``.npy``: the array only (the
    spacing is not stored). ``.npz``: ``label`` (integer data) or ``image`` (float data) plus
    ``spacing``. Labels are stored as uint8 / int16 (:func:`storage_dtype`). Creates parent
    folders. Returns the path.
    """
    path = Path(path)
    kind = volume_format(path)
    array = np.asarray(array)
    _check_shape(array.shape, path)
    vox = _spacing3(spacing, path)
    data = array.astype(storage_dtype(array), copy=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "npy":
        np.save(path, data)
    elif kind == "npz":
        key = "image" if np.issubdtype(data.dtype, np.floating) else "label"
        np.savez_compressed(path, **{key: data, "spacing": np.asarray(vox, np.float64)})
    else:
        _write_nifti(path, data, vox, like)
    return path


def _write_nifti(path: Path, data: np.ndarray, spacing: Spacing,
                 like: str | Path | None) -> None:
    import nibabel as nib

    zooms = spacing + ((1.0,) if data.ndim == 4 else ())
    if like is not None and volume_format(like) == "nifti":
        ref = _nifti(_as_path(like))
        old = np.asarray(ref.header.get_zooms()[:3], np.float64)
        affine = np.array(ref.affine, np.float64)
        affine[:3, :3] = affine[:3, :3] * (np.asarray(spacing) / old)[None, :]
        header = ref.header.copy()
        header.set_data_dtype(data.dtype)
        cls = type(ref) if isinstance(ref, nib.Nifti1Image | nib.Nifti2Image) else nib.Nifti1Image
        img = cls(data, affine, header)
    else:
        img = nib.Nifti1Image(data, np.diag([*spacing, 1.0]))
        img.header.set_data_dtype(data.dtype)
    img.header.set_zooms(zooms)
    nib.save(img, str(path))


# ----------------------------------------------------------------------------- listings


def _resolve(value: Any, base: str, where: str) -> str:
    """A listing's path ``value``: absolute paths and URLs as they are, relative ones beside
    the listing (in its folder ``base``, local or remote)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a file path string, got {value!r:.100}")
    value = value.strip()
    if files.is_url(value):
        return value
    if files.is_url(base):
        return files.join(base, value.removeprefix("./"))
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else Path(base) / p)


def _json_entries(data: Any, split: str, listing: str) -> list:
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        if split not in data:
            keys = sorted(k for k, v in data.items() if isinstance(v, list))
            raise ValueError(f"listing {listing}: no split {split!r}; it has {keys}")
        if not isinstance(data[split], list):
            raise ValueError(f"listing {listing}: {split!r} is not a list of records")
        return data[split]
    raise ValueError(f"listing {listing}: expected a JSON object (Decathlon style) or a list "
                     f"of records, got {type(data).__name__}")


def _read_json_listing(listing: str, split: str) -> list[dict]:
    try:
        data = json.loads(files.read_text(listing))
    except json.JSONDecodeError as e:
        raise ValueError(f"listing {listing}: not valid JSON ({e})") from e
    base = files.parent(listing)
    out = []
    for i, entry in enumerate(_json_entries(data, split, listing)):
        where = f"listing {listing}, {split if isinstance(data, dict) else 'record'} [{i}]"
        if isinstance(entry, str):  # Decathlon "test": ["./imagesTs/x.nii.gz", ...]
            entry = {"image": entry}
        if not isinstance(entry, dict) or "image" not in entry:
            raise ValueError(f"{where}: expected {{\"image\": path, \"label\": path}}, got "
                             f"{entry!r:.100}")
        record = dict(entry)
        record["image"] = _resolve(entry["image"], base, where + " image")
        label = entry.get("label")
        record["label"] = None if label is None else _resolve(label, base, where + " label")
        out.append(record)
    return out


def _read_csv_listing(listing: str) -> list[dict]:
    base = files.parent(listing)
    out = []
    seen_data = False
    lines = files.read_text(listing).splitlines()
    for lineno, row in enumerate(csv.reader(lines), start=1):
        fields = [f.strip() for f in row]
        if not fields or not any(fields) or fields[0].startswith("#"):
            continue
        where = f"listing {listing}, line {lineno}"
        if not seen_data and [f.lower() for f in fields] in (["image", "label"], ["image"]):
            seen_data = True  # header line
            continue
        seen_data = True
        if len(fields) > 2 or not fields[0]:
            raise ValueError(f"{where}: expected 'image,label' or 'image', got "
                             f"{lines[lineno - 1]!r:.120}")
        label = fields[1] if len(fields) == 2 and fields[1] else None
        out.append({"image": _resolve(fields[0], base, where),
                    "label": None if label is None else _resolve(label, base, where)})
    return out


def read_listing(path: str | Path, *, split: str = "training") -> list[dict]:
    """Records ``{"image": str, "label": str | None, ...}`` of a data set listing.

    * ``.json``: Medical Segmentation Decathlon style ``{"training": [{"image": ..., "label":
      ...}, ...], "test": [...]}`` (``split`` picks the key; plain path strings are images
      without labels), or a plain list of such records. Extra keys are kept.
    * ``.csv`` / ``.txt``: lines ``image,label`` (label optional); blank lines, ``#`` comments
      and a first line ``image,label`` are skipped.

    Relative paths resolve against the listing's folder (in the store, for a listing at a
    URL). Malformed entries raise ValueError
    naming the listing and the line / record; a missing listing raises FileNotFoundError.
    """
    listing = os.fspath(path)
    if not files.isfile(listing):
        raise FileNotFoundError(f"listing {listing}: no such file")
    suffix = os.path.splitext(listing)[1].lower()
    if suffix == ".json":
        return _read_json_listing(listing, split)
    if suffix in (".csv", ".txt"):
        return _read_csv_listing(listing)
    raise ValueError(f"listing {listing}: unknown extension {suffix!r}; expected .json, .csv "
                     "or .txt")


__all__ = ["NIFTI_SUFFIXES", "SUFFIXES", "Spacing", "VolumeReadError", "read_header",
           "read_listing", "read_volume", "storage_dtype", "volume_format", "write_volume"]
