"""Objects in a bucket that one writer owns: created only if absent, replaced and deleted
only by whoever holds the version they read.

GCS gives every object a *generation* that changes with each write, and accepts a write or a
delete on the condition that the object's generation is still the one given
(``ifGenerationMatch``; 0 means "does not exist"). That is enough for a lock that several
machines sharing no disk agree on (``train.bucket_lock``): the first to create the object holds
it; a later writer that read an older generation is refused instead of overwriting. (Objects
are never deleted here: a holder gives an object up by a conditional write, so only the
conditional upload is needed, the one condition every GCS emulator honours too.)

Only ``gs://`` URLs (gcsfs's JSON API) are served; every function raises
``FileExistsError`` when its condition fails (the object exists, or it changed since it was
read) and :class:`~jaxdet.files.errors.FileAccessError` (one line naming the URL) when the
store cannot be reached.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from urllib.parse import quote

from jaxdet.files.errors import remote_call
from jaxdet.files.paths import filesystem, scheme


@dataclass(frozen=True)
class Versioned:
    """An object's content and the generation it was read at."""

    data: bytes
    generation: str


def _gcs(url: str):
    if scheme(url) != "gs":
        raise ValueError(f"{url}: objects with preconditions need a gs:// URL")
    fs, inner = filesystem(url)
    bucket, _, key = inner.partition("/")
    if not key:
        raise ValueError(f"{url} names a bucket, not an object")
    return fs, bucket, key


def create_new(url: str, data: bytes) -> str:
    """Writes ``data`` to ``url`` only if no object is there; returns its generation.

    Raises:
      FileExistsError: an object is already there (nothing was written)."""
    return _upload(url, data, "0")


def replace(url: str, data: bytes, generation: str) -> str:
    """Overwrites ``url`` with ``data`` only if it is still at ``generation``; returns the new
    generation.

    Raises:
      FileExistsError: the object changed or was deleted since ``generation``."""
    return _upload(url, data, generation)


def _upload(url: str, data: bytes, generation: str) -> str:
    """One multipart upload (metadata and content in one request) on the condition
    ``ifGenerationMatch=generation``."""
    fs, bucket, key = _gcs(url)
    boundary = "jaxdet-" + secrets.token_hex(8)
    body = b"".join([
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
        json.dumps({"name": key}).encode(),
        f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
        data, f"\r\n--{boundary}--\r\n".encode()])
    try:
        out = remote_call(url, lambda: fs.call(
            "POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o",
            uploadType="multipart", ifGenerationMatch=generation, data=body,
            headers={"Content-Type": f"multipart/related; boundary={boundary}"},
            json_out=True))
    except FileNotFoundError:  # a replace of an object deleted since
        raise FileExistsError(url) from None
    fs.invalidate_cache(fs._parent(f"{bucket}/{key}"))
    return str(out["generation"])


def read(url: str) -> Versioned:
    """The object at ``url`` and its generation (content and generation of the same write).

    Raises:
      FileNotFoundError: no object there."""
    fs, bucket, key = _gcs(url)
    while True:
        meta = remote_call(url, lambda: fs.call("GET", "b/{}/o/{}", bucket, key, json_out=True))
        generation = str(meta["generation"])
        try:
            _, data = remote_call(url, lambda g=generation: fs.call(
                "GET", "b/{}/o/{}", bucket, key, alt="media", generation=g))
        except FileNotFoundError:  # replaced between the two reads: read the new one
            continue
        return Versioned(bytes(data), generation)


__all__ = ["Versioned", "create_new", "read", "replace"]
