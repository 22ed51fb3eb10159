"""Which framework wrote a weights file or folder: a jaxdet workdir, a TF checkpoint or a
PyTorch weight file, told apart by what is on disk (no file is read in full)."""

from __future__ import annotations

import os

from jaxdet import files
from jaxdet.interop.tf_checkpoint import CheckpointError, resolve_prefix
from jaxdet.interop.torch_files import PICKLE_SUFFIXES


def detect_format(path: str | os.PathLike) -> str:
    """``"jaxdet"`` for a workdir (``checkpoints/`` inside), ``"tf"`` for a TF checkpoint.

    Raises:
      FileNotFoundError: neither exists at ``path``.
    """
    path = os.fspath(path)
    if files.isdir(files.join(path, "checkpoints")):
        return "jaxdet"
    if path.endswith((".safetensors", *PICKLE_SUFFIXES)) and files.isfile(path):
        return "torch"
    try:
        resolve_prefix(path)
    except (FileNotFoundError, CheckpointError):
        raise FileNotFoundError(
            f"{path} is neither a jaxdet workdir (no checkpoints/ inside), a TF checkpoint "
            "(no PREFIX.index, no folder with a 'checkpoint' file) nor a PyTorch weight file "
            f"(.safetensors, {', '.join(PICKLE_SUFFIXES)})") from None
    return "tf"


def weights_format(checkpoint: str | os.PathLike | None, checkpoint_format: str = "auto"
                   ) -> str | None:
    """The format of the weights a job starts from or loads (``"tf"``, ``"jaxdet"``,
    ``"torch"``): ``checkpoint_format`` when given, else :func:`detect_format`'s; None without
    a checkpoint or when nothing is there (yet). A TF checkpoint's model sees TF's JPEG decode
    (``data.build.decode_mode``)."""
    if checkpoint is None:
        return None
    if checkpoint_format != "auto":
        return checkpoint_format
    try:
        return detect_format(checkpoint)
    except FileNotFoundError:
        return None


__all__ = ["detect_format", "weights_format"]
