"""One file-system layer for every path jaxdet reads or writes.

A path is a local path (``str`` or ``os.PathLike``) or a URL that fsspec knows:
``gs://bucket/key`` (needs ``gcsfs``: ``pip install 'jaxdet[gcs]'``), ``s3://...`` (``s3fs``),
``memory://...``, ``file://...``. Local paths take Python's own file functions (no overhead);
every URL takes the same functions through fsspec, so a caller never branches on the scheme.

Reading is streamed: :func:`open_file` gives a buffered file object that fetches blocks as it
reads, and :func:`read_range` fetches one byte range (one HTTP range request on GCS). Errors
are one line naming the path (:class:`FileAccessError`; a missing file stays a
``FileNotFoundError``); the remote libraries retry dropped connections themselves and
:func:`remote_call` tries once more before naming the failure.

Modules: ``paths`` (exists, glob, list, make and remove folders), ``streams`` (open, read
whole or a byte range, write), ``errors`` (one-line errors; one more try after the client's
own retries), ``mirror`` (a local folder kept in step with a bucket folder), ``exclusive``
(objects written on a condition: created only if absent, replaced only by their owner).
"""

from jaxdet.files.errors import FileAccessError
from jaxdet.files.paths import (
    basename,
    exists,
    files_under,
    getsize,
    glob,
    has_magic,
    is_url,
    isdir,
    isfile,
    join,
    listdir,
    makedirs,
    move,
    parent,
    remove,
    rmtree,
    scheme,
)
from jaxdet.files.streams import (
    open_file,
    read_bytes,
    read_range,
    read_text,
    write_bytes,
    write_text,
)

__all__ = [
    "FileAccessError",
    "basename",
    "exists",
    "files_under",
    "getsize",
    "glob",
    "has_magic",
    "is_url",
    "isdir",
    "isfile",
    "join",
    "listdir",
    "makedirs",
    "move",
    "open_file",
    "parent",
    "read_bytes",
    "read_range",
    "read_text",
    "remove",
    "rmtree",
    "scheme",
    "write_bytes",
    "write_text",
]
