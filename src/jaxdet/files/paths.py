"""Path operations on local paths and URLs alike (see the package docstring).

Every function takes a local path (``str`` / ``os.PathLike``) or a URL (``gs://bucket/key``)
and returns paths of the same kind as strings: a URL keeps its scheme. Local paths go to
``os`` / ``glob`` directly; URLs to their fsspec file system (one per scheme and process,
created on first use).
"""

from __future__ import annotations

import base64
import glob as _glob
import logging
import os
import posixpath
import shutil
from functools import cache
from typing import Any

from jaxdet.files.errors import missing_backend, remote_call

PathLike = str | os.PathLike


def scheme(path: PathLike) -> str:
    """The URL scheme of ``path`` (``"gs"``, ``"s3"``, ...), or ``""`` for a local path
    (``file://`` URLs are local)."""
    text = os.fspath(path)
    if "://" not in text:
        return ""
    name = text.split("://", 1)[0].lower()
    return "" if name in ("file", "local") else name


def is_url(path: PathLike) -> bool:
    """True for a path that names a remote (or in-memory) store, e.g. ``gs://bucket/key``."""
    return bool(scheme(path))


def local(path: PathLike) -> str:
    """A local path as a string, ``file://`` stripped."""
    text = os.fspath(path)
    return text.split("://", 1)[1] if "://" in text else text


@cache
def _filesystem(name: str, pid: int) -> Any:
    import fsspec

    fs = fsspec.filesystem(name)
    # the client logs each failure it gives up on with a traceback; jaxdet says it in one
    # line (errors.access_error). A level set by the user is kept.
    client_log = logging.getLogger(type(fs).__module__.split(".")[0])
    if client_log.level == logging.NOTSET:
        client_log.setLevel(logging.CRITICAL)
    return fs


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec file system of ``url``, the path inside it, without the scheme).

    Raises:
      FileAccessError: the scheme's package is not installed (naming the extra to install).
    """
    name = scheme(url)
    try:
        fs = _filesystem(name, os.getpid())  # a fresh one in each forked worker
    except ImportError as err:
        raise missing_backend(url, err) from None
    except ValueError as err:  # an unknown protocol
        raise missing_backend(url, ImportError(str(err))) from None
    return fs, fs._strip_protocol(url)


def _url(path: str, like: str) -> str:
    """``path`` inside a store, as a URL of the scheme of ``like``."""
    return f"{scheme(like)}://{path}"


def join(base: PathLike, *parts: str) -> str:
    """``base`` / ``parts``: ``posixpath.join`` for URLs, ``os.path.join`` for local paths."""
    text = os.fspath(base)
    if is_url(text):
        return posixpath.join(text, *parts)
    return os.path.join(local(text), *parts)


def parent(path: PathLike) -> str:
    """The folder holding ``path`` (a URL keeps its scheme and bucket)."""
    text = os.fspath(path).rstrip("/")
    return posixpath.dirname(text) if is_url(text) else os.path.dirname(local(text))


def basename(path: PathLike) -> str:
    """The last component of ``path``."""
    return posixpath.basename(os.fspath(path).rstrip("/"))


def has_magic(path: PathLike) -> bool:
    """True when ``path`` is a glob pattern (``*``, ``?``, ``[...]``)."""
    return _glob.has_magic(os.fspath(path))


def _ask(path: PathLike, on_disk, remote: str) -> Any:
    """``on_disk(local path)`` for a local path, else the file system's method ``remote`` on
    the path inside the store (errors as :func:`remote_call` gives them)."""
    if not is_url(path):
        return on_disk(local(path))
    fs, inner = filesystem(os.fspath(path))
    return remote_call(os.fspath(path), lambda: getattr(fs, remote)(inner))


def exists(path: PathLike) -> bool:
    """True when ``path`` names a file or folder."""
    return _ask(path, os.path.exists, "exists")


def isfile(path: PathLike) -> bool:
    """True when ``path`` names a file."""
    return _ask(path, os.path.isfile, "isfile")


def isdir(path: PathLike) -> bool:
    """True when ``path`` names a folder (on an object store: a prefix holding objects)."""
    return _ask(path, os.path.isdir, "isdir")


def getsize(path: PathLike) -> int:
    """The size of the file ``path`` in bytes."""
    return int(_ask(path, os.path.getsize, "size"))


def glob(pattern: PathLike, *, files_only: bool = False) -> list[str]:
    """The paths matching ``pattern``, sorted (URLs keep their scheme); ``**`` matches any
    depth of folders; only files with ``files_only`` (one listing on an object store, not one
    request per match)."""
    text = os.fspath(pattern)
    if not is_url(text):
        found = sorted(_glob.glob(local(text), recursive=True))
        return [p for p in found if os.path.isfile(p)] if files_only else found
    fs, inner = filesystem(text)
    entries = remote_call(text, lambda: fs.glob(inner, detail=True))
    return sorted(_url(p, text) for p, info in entries.items()
                  if not files_only or info.get("type") == "file")


def listdir(path: PathLike) -> list[str]:
    """The names (not paths) of the entries of the folder ``path``, sorted."""
    text = os.fspath(path)
    if not is_url(text):
        return sorted(os.listdir(local(text)))
    fs, inner = filesystem(text)
    entries = remote_call(text, lambda: fs.ls(inner, detail=False, refresh=True))
    return sorted({posixpath.basename(e.rstrip("/")) for e in entries} - {""})


def makedirs(path: PathLike) -> None:
    """Creates the folder ``path`` and its parents (nothing to do on an object store, where
    folders are prefixes)."""
    text = os.fspath(path)
    if not is_url(text):
        os.makedirs(local(text), exist_ok=True)
        return
    fs, inner = filesystem(text)
    remote_call(text, lambda: fs.makedirs(inner, exist_ok=True))


def remove(path: PathLike) -> None:
    """Deletes the file ``path`` (a missing file is not an error)."""
    text = os.fspath(path)
    if not is_url(text):
        try:
            os.remove(local(text))
        except FileNotFoundError:
            pass
        return
    fs, inner = filesystem(text)
    try:
        remote_call(text, lambda: fs.rm_file(inner))
    except FileNotFoundError:
        pass


def rmtree(path: PathLike) -> None:
    """Deletes the folder ``path`` and everything under it (a missing one is not an error)."""
    text = os.fspath(path)
    if not is_url(text):
        shutil.rmtree(local(text), ignore_errors=True)
        return
    fs, inner = filesystem(text)
    try:
        remote_call(text, lambda: fs.rm(inner, recursive=True))
    except FileNotFoundError:
        pass


def move(source: PathLike, target: PathLike) -> None:
    """Moves the file or folder ``source`` to ``target`` (same store; on an object store,
    object by object: copied, then deleted)."""
    text = os.fspath(source)
    if not is_url(text):
        os.makedirs(os.path.dirname(local(os.fspath(target))) or ".", exist_ok=True)
        shutil.move(local(text), local(os.fspath(target)))
        return
    fs, inner = filesystem(text)
    _, inner_target = filesystem(os.fspath(target))
    remote_call(text, lambda: fs.mv(inner, inner_target, recursive=True))


def _hex_crc(stored: str | None) -> str | None:
    """GCS's CRC32C (base64 of the 4 big-endian bytes) as hexadecimal digits."""
    return None if not stored else base64.b64decode(stored).hex()


def files_under(folder: PathLike) -> dict[str, dict]:
    """``{relative path: {"size": bytes, "crc32c": the store's checksum or None}}`` of every
    file under ``folder`` (one listing on an object store; GCS gives each object's CRC32C in
    it, so nothing is read; a local folder has no stored checksum). A CRC32C is given as 8
    hexadecimal digits, big-endian (as ``google_crc32c``'s ``hexdigest``)."""
    text = os.fspath(folder).rstrip("/")
    if not is_url(text):
        base = local(text)
        out = {}
        for root, _, names in os.walk(base):
            for name in names:
                path = os.path.join(root, name)
                out[os.path.relpath(path, base).replace(os.sep, "/")] = {
                    "size": os.path.getsize(path), "crc32c": None}
        return out
    fs, inner = filesystem(text)
    found = remote_call(text, lambda: fs.find(inner, detail=True))
    prefix = inner.rstrip("/") + "/"
    return {path[len(prefix):]: {"size": int(info.get("size") or 0),
                                 "crc32c": _hex_crc(info.get("crc32c"))}
            for path, info in found.items()
            if path.startswith(prefix) and info.get("type", "file") == "file"}


def forget_listings(url: PathLike) -> None:
    """Drops what the store's client remembers of folder listings under ``url``, so the next
    call sees objects another writer (orbax through tensorstore, another process) added or
    deleted since. Nothing to do for a local path."""
    text = os.fspath(url)
    if is_url(text):
        fs, inner = filesystem(text)
        fs.invalidate_cache(inner)
