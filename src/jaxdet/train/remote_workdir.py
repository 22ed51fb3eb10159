"""Workdirs and output folders in a remote store (``--workdir gs://bucket/run``).

A job on a remote workdir runs in a local staging folder that mirrors it
(:class:`jaxdet.files.mirror.Mirror`; ``$JAXDET_STAGING_DIR``, else
``~/.cache/jaxdet/staging``): orbax, TensorBoard and the metrics log write local files as
always, and the folder goes up to the store as the run goes.

* **Training** (:func:`staged_training`) first makes its staging folder an exact copy of the
  remote workdir, so a run resumed on another machine (a preempted TPU VM's replacement)
  starts from what the bucket holds. After each checkpoint is complete and sealed (its
  checksums written) every changed file goes up, the checksums file last, and the checkpoints
  the run rotated out are deleted from the bucket; everything goes up once more when the run
  ends, stopped or not. A checkpoint folder in the bucket counts only once its checksums file
  is there: one whose upload was cut off is never read.
* **Readers** (``eval``, ``eval --watch``, ``predict``, ``export`` with ``--workdir``;
  :func:`staged_reader`) copy the run's sealed checkpoints and files into a staging folder of
  their own, and send back only what they write (``eval/step_N``, ``eval_watch/``); they never
  delete anything in the bucket.
* **Weights** (``--checkpoint gs://.../run``, ``train.init_checkpoint`` naming a run in a
  bucket; :func:`readable_workdir`) are read from a reader's staging copy.
* **Output folders** (``--out gs://...``; :func:`staged_output`) are written locally, then
  uploaded whole.

Several processes (a multi-host run) on a remote workdir are not supported yet: use a shared
file system for those.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jaxdet import files
from jaxdet.files.mirror import Mirror, staging_folder
from jaxdet.train.checkpoint_integrity import CHECKSUMS
from jaxdet.train.workdir_lock import LOCK_NAME

_STEP_FILE = re.compile(r"^checkpoints/([^/]+)/")


def _never_uploaded(rel: str) -> bool:
    """Local-only files: the training lock, orbax's unfinished saves, partial downloads."""
    return (rel == LOCK_NAME or ".orbax-checkpoint-tmp" in rel or rel.endswith(".partial"))


def _sealed_only(rel: str, remote: dict[str, int]) -> bool:
    """Whether to fetch ``rel``: not a checkpoint file, or one of a step whose checksums file
    (uploaded last) is in the store."""
    match = _STEP_FILE.match(rel)
    return match is None or f"checkpoints/{match[1]}/{CHECKSUMS}" in remote


def _is_seal(rel: str) -> bool:
    return rel.endswith("/" + CHECKSUMS)


def _check_single_process(url: str) -> None:
    import jax

    if jax.process_count() > 1:
        raise ValueError(f"--workdir {url}: a remote workdir takes one process for now; give "
                         "a multi-process run a workdir on a file system all hosts share")


class StagedWorkdir:
    """A remote workdir (``url``) and its local staging folder (``local``)."""

    def __init__(self, url: str, role: str):
        self.url = url.rstrip("/")
        self.mirror = Mirror(self.url, staging_folder(self.url, role), skip=_never_uploaded)

    @property
    def local(self) -> Path:
        return self.mirror.local

    def pull(self, *, exact: bool) -> int:
        """Fetch what the bucket holds (sealed checkpoints only); see the module docstring.

        Raises:
          FileNotFoundError: the bucket does not exist (before anything is written)."""
        return self.mirror.pull(exact=exact, wanted=_sealed_only)

    def push(self, *, owner: bool) -> int:
        """Send up what changed locally; the owner (the training run) also deletes the
        checkpoints it rotated out."""
        return self.mirror.push(sync=("checkpoints/",) if owner else (), last=_is_seal)


@contextlib.contextmanager
def staged_training(workdir: str | os.PathLike) -> Iterator[StagedWorkdir | None]:
    """For a remote ``workdir``: its staging folder, pulled exactly, and pushed when the block
    ends (whatever ends it); None for a local one. The training run pushes after each sealed
    checkpoint too (``Checkpointer.on_sealed``)."""
    if not files.is_url(workdir):
        yield None
        return
    _check_single_process(os.fspath(workdir))
    staged = StagedWorkdir(os.fspath(workdir), "train")
    staged.pull(exact=True)
    try:
        yield staged
    finally:
        staged.push(owner=True)


@contextlib.contextmanager
def staged_reader(workdir: str | os.PathLike | None) -> Iterator[str | os.PathLike | None]:
    """A reader's view of ``workdir``: for a remote one, a staging folder holding its sealed
    checkpoints and files, whose new files (evaluations) are sent back when the block ends;
    a local workdir (or None) as it is."""
    if workdir is None or not files.is_url(workdir):
        yield workdir
        return
    staged = StagedWorkdir(os.fspath(workdir), "read")
    staged.pull(exact=True)
    try:
        yield staged.local
    finally:
        staged.push(owner=False)


def readable_workdir(workdir: str | os.PathLike) -> Path:
    """A workdir as a local folder to read: a remote one (``gs://...``) is copied into a
    reader's staging folder first (its sealed checkpoints and files)."""
    if not files.is_url(workdir):
        return Path(workdir)
    url = os.fspath(workdir).rstrip("/")
    mirror = Mirror(url, staging_folder(url, "read"), skip=_never_uploaded)
    mirror.pull(exact=True, wanted=_sealed_only)
    return mirror.local


@contextlib.contextmanager
def staged_output(out: str | os.PathLike | None) -> Iterator[str | os.PathLike | None]:
    """An output folder: for a remote one, a local temporary folder uploaded to it when the
    block ends without an error; a local one (or None) as it is."""
    if out is None or not files.is_url(out):
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="jaxdet-out-") as tmp:
        local = Path(tmp) / "out"  # not there yet, as a new output folder would not be
        yield local
        Mirror(os.fspath(out), local).push()


__all__ = ["StagedWorkdir", "readable_workdir", "staged_output", "staged_reader", "staged_training"]
