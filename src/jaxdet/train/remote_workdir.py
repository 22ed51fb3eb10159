"""Workdirs and output folders in a remote store (``--workdir gs://bucket/run``).

**Checkpoints go straight to the bucket** on ``gs://``: orbax writes them through tensorstore,
every process of a multi-process run its own part, with no local copy; a step counts once
orbax has committed it (its ``commit_success.txt``), and is then sealed (its objects' sizes
and CRC32Cs, from one listing, in ``jaxdet_checksums.json``). The training lock is an object
in the bucket (``train.bucket_lock``), so two machines sharing no disk never train one
workdir at once. Readers (``eval``, ``eval --watch``, ``predict``, ``export``, weights from
``--checkpoint gs://.../run``) restore from the bucket too.

**The rest of a workdir is staged**: ``config.yaml``, ``metrics.jsonl``, the TensorBoard
event files, ``curves.png`` and evaluation outputs are written in a local folder that mirrors
the workdir (:class:`jaxdet.files.mirror.Mirror`; ``$JAXDET_STAGING_DIR``, else
``~/.cache/jaxdet/staging``) and go up as the run goes: the metrics log and TensorBoard append
to their files, which an object store cannot do. Each process fetches them when it starts
(a run resumed on another machine starts from what the bucket holds); only process 0 writes
and sends them, after each sealed checkpoint and when the run ends, stopped or not. Readers
send back only what they write (``eval/step_N``, ``eval_watch/``) and never delete anything.

Other stores (``s3://``, ``memory://``) stage checkpoints too, as the only way orbax reaches
them here: a checkpoint folder goes up after it is complete and sealed, the checksums file
last, and counts in the store only once that file is there; the run takes one process.

**Output folders** (``--out gs://...``; :func:`staged_output`) are written locally, then
uploaded whole.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jaxdet import files
from jaxdet.files.mirror import Mirror, staging_folder
from jaxdet.train.checkpoint_integrity import CHECKSUMS
from jaxdet.train.workdir_lock import LOCK_NAME

logger = logging.getLogger("jaxdet")

_STEP_FILE = re.compile(r"^checkpoints/([^/]+)/")
# in a staging folder: the bucket folder whose checkpoints it stands beside (never uploaded)
BUCKET_MARK = ".jaxdet-bucket"
_IN_BUCKET = ("checkpoints/", "damaged_checkpoints/")


def native_checkpoints(url: str) -> bool:
    """Whether orbax writes checkpoints into ``url`` directly (GCS), else through staging."""
    return files.scheme(url) == "gs"


def _never_uploaded(rel: str) -> bool:
    """Local-only files: the training lock, orbax's unfinished saves, partial downloads, the
    bucket mark."""
    return (rel in (LOCK_NAME, BUCKET_MARK) or ".orbax-checkpoint-tmp" in rel
            or rel.endswith(".partial"))


def _never_staged(rel: str) -> bool:
    """For a workdir whose checkpoints live in the bucket: those, and the local-only files."""
    return rel.startswith(_IN_BUCKET) or _never_uploaded(rel)


def checkpoints_location(workdir: str | os.PathLike) -> Path | str:
    """Where the checkpoints of the workdir ``workdir`` (a local folder, or the staging folder
    of a bucket workdir) are: ``workdir/checkpoints``, or the bucket's ``.../checkpoints``
    URL."""
    mark = Path(workdir) / BUCKET_MARK
    if mark.is_file():
        return files.join(mark.read_text().strip(), "checkpoints")
    return Path(workdir) / "checkpoints"


def _sealed_only(rel: str, remote: dict[str, int]) -> bool:
    """Whether to fetch ``rel``: not a checkpoint file, or one of a step whose checksums file
    (uploaded last) is in the store."""
    match = _STEP_FILE.match(rel)
    return match is None or f"checkpoints/{match[1]}/{CHECKSUMS}" in remote


def _is_seal(rel: str) -> bool:
    return rel.endswith("/" + CHECKSUMS)


_COMMITTED = "commit_success.txt"  # orbax's mark of a finished step in a bucket


def adopt_disk_checkpoints(url: str, listing: dict[str, int]) -> list[str]:
    """Give orbax's commit marks to the checkpoints of the workdir ``url`` that were written
    on a disk and copied into the bucket (``gsutil cp -r run gs://...``): on a disk orbax marks
    a finished step by renaming it, so such a step has no ``commit_success.txt``, and orbax on
    GCS would neither list it nor keep it. A step counts as finished when jaxdet sealed it (its
    checksums file, written only after orbax finished). ``listing``: ``{relative path: size}``
    of the workdir's files. Returns the steps adopted."""
    steps: dict[str, set[str]] = {}
    for rel in listing:
        match = _STEP_FILE.match(rel)
        if match:
            steps.setdefault(match[1], set()).add(rel[len(match[0]):])
    adopted = []
    for step, names in sorted(steps.items()):
        if CHECKSUMS not in names or _COMMITTED in names:
            continue
        folder = files.join(url, "checkpoints", step)
        items = sorted({name.split("/", 1)[0] for name in names if "/" in name})
        for target in [*(files.join(folder, item) for item in items), folder]:  # the step last
            files.write_text(files.join(target, _COMMITTED),
                             f"Checkpoint commit was successful to {target}")
        adopted.append(step)
    if adopted:
        logger.info("%s: checkpoint(s) %s, copied from a disk, marked committed for orbax",
                    url, ", ".join(adopted))
    return adopted


def _process() -> tuple[int, int]:
    import jax

    return jax.process_index(), jax.process_count()


class StagedWorkdir:
    """A remote workdir (``url``) and its local staging folder (``local``); ``native``: its
    checkpoints stay in the bucket (see the module docstring)."""

    def __init__(self, url: str, role: str):
        self.url = url.rstrip("/")
        self.native = native_checkpoints(self.url)
        self.mirror = Mirror(self.url, staging_folder(self.url, role),
                             skip=_never_staged if self.native else _never_uploaded)

    @property
    def local(self) -> Path:
        return self.mirror.local

    def pull(self, *, exact: bool) -> int:
        """Fetch what the bucket holds (of a staged workdir's checkpoints, the sealed ones
        only; of a native one's, none); see the module docstring.

        Raises:
          FileNotFoundError: the bucket does not exist (before anything is written)."""
        if self.native:
            self.mirror.require_bucket()
            adopt_disk_checkpoints(self.url, self.mirror.remote_files())
        count = self.mirror.pull(
            exact=exact, wanted=(lambda rel, _: not _never_staged(rel)) if self.native
            else _sealed_only)
        mark = self.local / BUCKET_MARK
        if self.native:
            mark.write_text(self.url + "\n")
            for folder in _IN_BUCKET:  # left by an older jaxdet's staging: the bucket's count
                shutil.rmtree(self.local / folder, ignore_errors=True)
        else:
            mark.unlink(missing_ok=True)
        return count

    def push(self, *, owner: bool) -> int:
        """Send up what changed locally; the owner (the training run) of a staged workdir also
        deletes the checkpoints it rotated out (orbax does it in a native one)."""
        sync = ("checkpoints/",) if owner and not self.native else ()
        return self.mirror.push(sync=sync, last=_is_seal)


@contextlib.contextmanager
def staged_training(workdir: str | os.PathLike) -> Iterator[StagedWorkdir | None]:
    """For a remote ``workdir``: its staging folder, pulled exactly, and pushed when the block
    ends (whatever ends it); None for a local one. The training run pushes after each sealed
    checkpoint too (``Checkpointer.on_sealed``)."""
    if not files.is_url(workdir):
        yield None
        return
    url = os.fspath(workdir)
    index, count = _process()
    if count > 1 and not native_checkpoints(url):
        raise ValueError(f"--workdir {url}: a workdir in {files.scheme(url)}:// takes one "
                         "process; give a multi-process run a gs:// workdir or one on a file "
                         "system all hosts share")
    # each process its own staging folder (several may share a machine); process 0 sends
    staged = StagedWorkdir(url, "train" if index == 0 else f"train-process{index}")
    staged.pull(exact=True)
    try:
        yield staged
    finally:
        if index == 0:
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
    staged = StagedWorkdir(os.fspath(workdir), "read")
    staged.pull(exact=True)
    return staged.local


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


__all__ = ["BUCKET_MARK", "StagedWorkdir", "checkpoints_location", "native_checkpoints",
           "readable_workdir", "staged_output", "staged_reader", "staged_training"]
