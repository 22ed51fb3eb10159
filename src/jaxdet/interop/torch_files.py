"""PyTorch weight files as ``{key: numpy array}``, safely.

* ``.safetensors`` is read here, without torch: an 8-byte little-endian header length, a JSON
  header ``{key: {"dtype", "shape", "data_offsets": [begin, end]}}`` (offsets into the data
  after the header), then the tensors' raw little-endian bytes.
* ``.pth`` / ``.pt`` / ``.bin`` are pickles. jaxdet never unpickles a file itself: it asks
  PyTorch, when installed, with ``torch.load(weights_only=True)`` (tensors and plain
  containers only, no code), and otherwise says to install torch or convert the file to
  safetensors.

A ``{"state_dict": ...}`` or ``{"model": ...}`` wrapper (training checkpoints) is unwrapped.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct

import ml_dtypes
import numpy as np

from jaxdet import files

SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}
PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")


class TorchFileError(ValueError):
    """A weight file that cannot be read; the message names the file and the entry."""


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file (``__metadata__`` skipped); ``path`` is a local
    path or a URL (``gs://...``)."""
    path = os.fspath(path)
    data = files.read_bytes(path)
    if len(data) < 8:
        raise TorchFileError(f"{path}: {len(data)} bytes is too short for a safetensors file")
    (size,) = struct.unpack_from("<Q", data, 0)
    if 8 + size > len(data):
        raise TorchFileError(f"{path}: header of {size} bytes runs past the end of the "
                             f"{len(data)}-byte file: not a safetensors file, or truncated")
    try:
        header = json.loads(data[8:8 + size])
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TorchFileError(f"{path}: the header is not JSON ({e}): not a safetensors file"
                             ) from None
    body = memoryview(data)[8 + size:]
    out = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise TorchFileError(f"{path}: tensor {key!r} has dtype {entry.get('dtype')!r}, "
                                 f"which jaxdet does not read")
        begin, end = entry["data_offsets"]
        shape = tuple(int(d) for d in entry["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end > len(body) or end - begin != count * np.dtype(dtype).itemsize:
            raise TorchFileError(f"{path}: tensor {key!r} needs bytes [{begin}, {end}) of "
                                 f"{len(body)}: the file is truncated or corrupt")
        out[key] = np.frombuffer(body[begin:end], np.dtype(dtype).newbyteorder("<")
                                 ).astype(dtype).reshape(shape)
    return out


def _unwrap(state: dict) -> dict:
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state.get(key), dict):
            return state[key]
    return state


def _why(error: Exception) -> str:
    """The reason in torch's (long, multi-line, ANSI-coloured) refusal: the global it would
    have had to import, or the message's first line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    match = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if match:
        return f"it needs the Python object {match.group(1)}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def read_torch_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{key: array}`` of a PyTorch weight file (see the module docstring).

    Raises:
      FileNotFoundError: no such file.
      TorchFileError: unreadable, or a pickle without PyTorch installed.
    """
    path = os.fspath(path)
    if not files.isfile(path):
        raise FileNotFoundError(f"weight file not found: {path}")
    suffix = os.path.splitext(files.basename(path))[1]
    if suffix == ".safetensors":
        return read_safetensors(path)
    if suffix not in PICKLE_SUFFIXES:
        raise TorchFileError(f"{path}: not a weight file jaxdet knows (.safetensors, or a "
                             f"PyTorch pickle: {', '.join(PICKLE_SUFFIXES)})")
    try:
        import torch
    except ImportError:
        raise TorchFileError(
            f"{path} is a pickle, which jaxdet never unpickles itself; install PyTorch "
            "(pip install torch: it is read with torch.load(weights_only=True)) or convert "
            "it to .safetensors") from None
    try:
        source = io.BytesIO(files.read_bytes(path)) if files.is_url(path) else path
        state = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; name the file and why
        raise TorchFileError(f"{path}: torch.load(weights_only=True) refused it ({_why(e)}); "
                             "jaxdet does not load pickles that need arbitrary code. If you "
                             "trust the file, save its state dict alone (torch.save("
                             "model.state_dict(), ...)) or as .safetensors") from None
    if not isinstance(state, dict):
        raise TorchFileError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return {k: v.detach().cpu().numpy() for k, v in _unwrap(state).items()
            if hasattr(v, "detach")}


__all__ = ["TorchFileError", "read_safetensors", "read_torch_weights"]
