"""Scalar metrics to ``workdir/metrics.jsonl`` and TensorBoard (``workdir/tensorboard/``).

Each ``log`` call appends one JSON line ``{"step": int, "time": unix seconds,
"metrics": {name: value}}`` (non-finite values written as ``null``) and one TensorBoard
scalar per metric; ``log_images`` writes pictures (an evaluation's) to TensorBoard only.
Only the process that should write (JAX process 0) passes ``enabled=True``; a disabled
logger touches no files.

With ``tensorboard_tags="tf"`` TensorBoard gets the TF OD API's layout instead
(``train.tf_tags``): training scalars in ``<tf_root>/train``, evaluation scalars and pictures
in ``<tf_root>/eval``, under TF's tags (``Loss/total_loss``, ``learning_rate``,
``steps_per_sec``, ``DetectionBoxes_Precision/mAP``, ...); ``metrics.jsonl`` is the same.

A run resumed from the checkpoint of step ``resume_step`` passes it: rows logged after that
step by the killed run (steps it trained again) are dropped from ``metrics.jsonl`` and
TensorBoard discards its events after it (``purge_step``), so every step appears once.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxdet.train.tf_tags import tf_scalars, tf_tag


def _summary_writer_class() -> type:
    """tensorboardX's ``SummaryWriter``, imported without loading PyTorch.

    tensorboardX imports torch, when it is installed, only to accept torch tensors; jaxdet
    logs Python floats, and loading torch would add 1-1.5 s to the start of every run. A
    process that has already loaded torch (or tensorboardX) keeps it as it is."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` -> ImportError
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]  # a later `import torch` loads it as usual
    return SummaryWriter


def _scalar(name: str, value: Any) -> float:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"metric {name!r} is not a scalar (shape {array.shape}).")
    return float(array.reshape(()))


class MetricsLogger:
    def __init__(self, workdir: str | Path, enabled: bool = True, flush_secs: int = 10,
                 resume_step: int | None = None, *, tensorboard_tags: str = "jaxdet",
                 tf_root: str | Path | None = None, batch_size: int | None = None):
        self.workdir = Path(workdir)
        self.enabled = enabled
        self.jsonl_path = self.workdir / "metrics.jsonl"
        self.tensorboard_dir = self.workdir / "tensorboard"
        self.tf_tags = tensorboard_tags == "tf"
        self.tf_root = self.workdir if tf_root is None else Path(tf_root)
        self.batch_size = batch_size
        self._file = None
        self._writer = None
        self._tf_writers: dict[str, Any] = {}
        if enabled:
            SummaryWriter = _summary_writer_class()  # noqa: N806

            self.workdir.mkdir(parents=True, exist_ok=True)
            purge = None
            if resume_step is not None:
                purge = int(resume_step) + 1
                drop_rows_after(self.jsonl_path, int(resume_step))
            self._file = open(self.jsonl_path, "a", buffering=1)  # noqa: SIM115
            if self.tf_tags:  # each run's writer made when it first writes
                self._new_tf_writer = lambda run: SummaryWriter(
                    logdir=str(self.tf_root / run), flush_secs=flush_secs, purge_step=purge)
            else:
                self._writer = SummaryWriter(logdir=str(self.tensorboard_dir),
                                             flush_secs=flush_secs, purge_step=purge)

    def log(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> None:
        """Log scalars at ``step``; names become ``prefix/name`` when a prefix is given."""
        if not self.enabled or self._file is None:
            return
        values = {
            (f"{prefix.rstrip('/')}/{name}" if prefix else str(name)): _scalar(name, value)
            for name, value in metrics.items()
        }
        record = {
            "step": int(step),
            "time": time.time(),
            "metrics": {k: (v if math.isfinite(v) else None) for k, v in values.items()},
        }
        self._file.write(json.dumps(record) + "\n")
        if self.tf_tags:
            self._log_tf(int(step), values)
            return
        for name, value in values.items():
            self._writer.add_scalar(name, value, global_step=int(step))

    def _log_tf(self, step: int, values: dict[str, float]) -> None:
        """TF's tags (``train.tf_tags``), written as given: tensorboardX's ``add_scalar``
        would rewrite TF's ``@`` and spaces (``mAP@.50IOU``, ``mAP (small)``)."""
        from tensorboardX.proto.summary_pb2 import Summary

        by_run: dict[str, list] = {}
        for name, value in tf_scalars(values, batch_size=self.batch_size).items():
            run, tag = tf_tag(name)
            by_run.setdefault(run, []).append(Summary.Value(tag=tag, simple_value=value))
        for run, entries in by_run.items():
            self._tf_writer(run)._get_file_writer().add_summary(Summary(value=entries), step)

    def _tf_writer(self, run: str):
        if run not in self._tf_writers:
            self._tf_writers[run] = self._new_tf_writer(run)
        return self._tf_writers[run]

    def log_images(self, step: int, images: Mapping[str, Any]) -> None:
        """Log pictures at ``step`` to TensorBoard only (one PNG image per tag): ``images``
        maps a tag to uint8 [H, W, 3] pixels (an evaluation's ``eval_side_by_side_<k>``)."""
        if not self.enabled or self._file is None:
            return
        writer = self._tf_writer("eval") if self.tf_tags else self._writer
        for tag, pixels in images.items():
            array = np.asarray(pixels)
            if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
                raise ValueError(f"image {tag!r}: need uint8 [H, W, 1|3|4] pixels, got "
                                 f"{array.dtype} {array.shape}")
            writer.add_image(str(tag), array, global_step=int(step), dataformats="HWC")

    def _writers(self) -> list:
        return [w for w in (self._writer, *self._tf_writers.values()) if w is not None]

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            for writer in self._writers():
                writer.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            for writer in self._writers():
                writer.close()
            self._file = self._writer = None
            self._tf_writers = {}

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def drop_rows_after(path: str | Path, step: int) -> int:
    """Rewrite the JSONL file ``path`` without its rows logged at a step > ``step``; a row
    that does not parse (a line cut by a kill) is dropped too. Returns the rows dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            row_step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if row_step > step:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(f"{line}\n" for line in kept))
        tmp.replace(path)
    return dropped


__all__ = ["MetricsLogger", "drop_rows_after"]
