"""A local folder kept in step with a folder in a remote store (``gs://bucket/run``).

Jobs whose libraries write local files (orbax checkpoints, TensorBoard event files, the
metrics log, evaluation outputs) run in a local *staging* folder that mirrors the remote one:
:meth:`Mirror.pull` makes the staging folder hold what the remote folder holds, and
:meth:`Mirror.push` uploads what changed locally since the last push (streamed, file by file)
and deletes remote files that were deleted locally under the prefixes it is told to sync. Files
matched by ``last`` go up after all the others, so a marker written when a set of files is
complete (a checkpoint's checksums) never reaches the store before the files it vouches for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from jaxdet.files.errors import remote_call
from jaxdet.files.paths import exists, filesystem, is_url, join
from jaxdet.files.streams import open_file

logger = logging.getLogger("jaxdet.files")

COPY_BLOCK_BYTES = 8 << 20


def staging_root() -> Path:
    """Where staging folders live: ``$JAXDET_STAGING_DIR``, else ``~/.cache/jaxdet/staging``."""
    given = os.environ.get("JAXDET_STAGING_DIR")
    return Path(given) if given else Path.home() / ".cache" / "jaxdet" / "staging"


def staging_folder(url: str, role: str) -> Path:
    """The staging folder of the remote folder ``url`` for one kind of job (``role``:
    ``train``, ``eval``, ...), so that a training run and an evaluation beside it on one
    machine never share one."""
    digest = hashlib.sha1(url.rstrip("/").encode()).hexdigest()[:12]
    name = url.rstrip("/").split("://", 1)[-1].replace("/", "_")[-60:]
    return staging_root() / role / f"{name}-{digest}"


def _version(info: dict) -> str | None:
    """What changes with an object's content in a store's listing entry, None if nothing
    does (then the size alone tells a changed file)."""
    for key in ("generation", "etag", "ETag", "md5Hash", "crc32c", "mtime", "updated",
                "LastModified", "created"):
        if info.get(key) is not None:
            return f"{key}={info[key]}"
    return None


def _copy(source, target) -> None:
    while chunk := source.read(COPY_BLOCK_BYTES):
        target.write(chunk)


class Mirror:
    """The remote folder ``remote`` (a URL) and its local staging folder ``local``.

    ``skip(relative_path)`` names local files never uploaded (locks, temporary folders)."""

    def __init__(self, remote: str, local: str | os.PathLike,
                 skip: Callable[[str], bool] = lambda rel: False):
        if not is_url(remote):
            raise ValueError(f"{remote} is not a URL: a local folder needs no mirror")
        self.remote = remote.rstrip("/")
        self.local = Path(local)
        self.skip = skip
        self._pushed: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns)
        self._bucket_seen = False

    def require_bucket(self) -> None:
        """Raise FileNotFoundError unless the remote folder's bucket exists (checked once: a
        watcher pulls at every look). A folder in a missing bucket would list as empty."""
        if self._bucket_seen:
            return
        scheme, rest = self.remote.split("://", 1)
        bucket = f"{scheme}://{rest.split('/', 1)[0]}"
        if not exists(bucket):
            raise FileNotFoundError(f"{self.remote}: the bucket {bucket} does not exist "
                                    "(create it first, e.g. gcloud storage buckets create "
                                    f"{bucket})")
        self._bucket_seen = True

    def remote_listing(self) -> dict[str, tuple[int, str | None]]:
        """``{relative path: (size, version)}`` of every file under the remote folder; the
        version is what the store says changes with the content (GCS's generation, an ETag,
        a checksum), None where it says nothing."""
        fs, inner = filesystem(self.remote)
        found = remote_call(self.remote, lambda: fs.find(inner, detail=True))
        prefix = inner.rstrip("/") + "/"
        return {path[len(prefix):]: (int(info.get("size") or 0), _version(info))
                for path, info in found.items()
                if path.startswith(prefix) and info.get("type", "file") == "file"}

    def remote_files(self) -> dict[str, int]:
        """``{relative path: size}`` of every file under the remote folder."""
        return {rel: size for rel, (size, _) in self.remote_listing().items()}

    @property
    def _versions_file(self) -> Path:
        # beside the staging folder, not in it: never uploaded, never listed as a local file
        return self.local.with_name(self.local.name + ".versions.json")

    def _known_versions(self) -> dict[str, str | None]:
        try:
            return json.loads(self._versions_file.read_text())
        except (OSError, ValueError):
            return {}

    def _record_versions(self, versions: dict[str, str | None]) -> None:
        self._versions_file.parent.mkdir(parents=True, exist_ok=True)
        self._versions_file.write_text(json.dumps(versions))

    def local_files(self) -> dict[str, os.stat_result]:
        """``{relative path: stat}`` of every local file not skipped."""
        out = {}
        if self.local.is_dir():
            for path in self.local.rglob("*"):
                rel = path.relative_to(self.local).as_posix()
                if path.is_file() and not self.skip(rel):
                    out[rel] = path.stat()
        return out

    def pull(self, *, exact: bool = True,
             wanted: Callable[[str, dict[str, int]], bool] = lambda rel, remote: True) -> int:
        """Downloads the remote files missing locally, of another size, or replaced in the
        store since this folder last fetched or sent them (by the store's version), those
        for which
        ``wanted(relative path, {every remote file: size})`` holds (e.g. only the checkpoint
        folders whose completion marker is there); with ``exact``, deletes the local files
        the remote folder does not hold (skipped ones kept). Returns how many were
        downloaded.

        Raises:
          FileNotFoundError: the bucket does not exist (before anything is written)."""
        self.require_bucket()
        self.local.mkdir(parents=True, exist_ok=True)
        listing, local = self.remote_listing(), self.local_files()
        sizes = {rel: size for rel, (size, _) in listing.items()}
        remote = {rel: entry for rel, entry in listing.items() if wanted(rel, sizes)}
        known = self._known_versions()
        count = 0
        for rel, (size, version) in sorted(remote.items()):
            if (rel in local and local[rel].st_size == size
                    and (version is None or known.get(rel) == version)):
                continue  # the same object as the one fetched or sent before
            target = self.local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            with open_file(join(self.remote, rel), "rb") as src, open(partial, "wb") as dst:
                _copy(src, dst)
            partial.replace(target)
            count += 1
        if exact:
            for rel in set(local) - set(remote):
                (self.local / rel).unlink(missing_ok=True)
            self._remove_empty_folders()
        self._record_versions({rel: version for rel, (_, version) in remote.items()})
        self._pushed = {rel: (st.st_size, st.st_mtime_ns)
                        for rel, st in self.local_files().items()}
        if count:
            logger.info("%s: %d file(s) fetched into %s", self.remote, count, self.local)
        return count

    def push(self, *, sync: Iterable[str] = (), last: Callable[[str], bool] = lambda r: False
             ) -> int:
        """Uploads the local files changed since the last pull or push (``last`` ones after
        the others); deletes the remote files under the ``sync`` prefixes (relative folders,
        e.g. ``checkpoints/``) that are gone locally. Returns how many files went up."""
        local = self.local_files()
        changed = [rel for rel, st in local.items()
                   if self._pushed.get(rel) != (st.st_size, st.st_mtime_ns)]
        changed.sort(key=lambda rel: (last(rel), rel))
        for rel in changed:
            with open(self.local / rel, "rb") as src, \
                    open_file(join(self.remote, rel), "wb") as dst:
                _copy(src, dst)
            self._pushed[rel] = (local[rel].st_size, local[rel].st_mtime_ns)
        prefixes = tuple(p.rstrip("/") + "/" for p in sync)
        if not changed and not prefixes:
            return 0
        listing = self.remote_listing()
        if changed:  # what was sent is what a later pull on this folder need not fetch again
            known = self._known_versions()
            known.update({rel: listing[rel][1] for rel in changed if rel in listing})
            self._record_versions(known)
        if prefixes:
            fs, inner = filesystem(self.remote)
            for rel in listing:
                if rel.startswith(prefixes) and rel not in local and not self.skip(rel):
                    remote_call(self.remote, lambda r=rel: fs.rm_file(f"{inner}/{r}"))
                    self._pushed.pop(rel, None)
        return len(changed)

    def _remove_empty_folders(self) -> None:
        """Folders left empty by a pull (a checkpoint step the remote folder no longer holds
        must not stay behind as an empty step folder)."""
        for folder in sorted((p for p in self.local.rglob("*") if p.is_dir()),
                             key=lambda p: len(p.parts), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()

    def clear_local(self) -> None:
        """Deletes the staging folder."""
        shutil.rmtree(self.local, ignore_errors=True)
        self._versions_file.unlink(missing_ok=True)
