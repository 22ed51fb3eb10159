"""Reading and writing file contents, local or remote alike (see the package docstring).

Remote reads are streamed: :func:`open_file` returns fsspec's buffered file, which fetches
``block_size`` bytes at a time as it is read (never the whole object first), and
:func:`read_range` fetches exactly one byte range. Remote writes go to the store when the file
is closed (an object appears whole or not at all).
"""

from __future__ import annotations

import os
from typing import IO, Any

from jaxdet.files.errors import remote_call
from jaxdet.files.paths import PathLike, filesystem, is_url, local

READ_BLOCK_BYTES = 8 << 20  # a remote file's read-ahead block


def open_file(path: PathLike, mode: str = "rb", *, encoding: str | None = None,
              block_size: int | None = None) -> IO[Any]:
    """``path`` opened in ``mode`` (``"rb"``, ``"wb"``, ``"r"``, ``"w"``, ``"ab"`` where
    the store allows it). Text modes default to UTF-8.

    Raises:
      FileNotFoundError: reading a file that does not exist (the message names it).
      FileAccessError: anything else that stops the store (one line, the path first).
    """
    text = os.fspath(path)
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    if not is_url(text):
        return open(local(text), mode, encoding=encoding)  # noqa: SIM115 - the caller closes
    fs, inner = filesystem(text)
    kwargs: dict[str, Any] = {"block_size": block_size or READ_BLOCK_BYTES}
    if "r" in mode:  # read ahead one block at a time: a predictable stream, whatever the store
        kwargs["cache_type"] = "readahead"
    if encoding is not None:
        kwargs["encoding"] = encoding
    return remote_call(text, lambda: fs.open(inner, mode, **kwargs))


def read_bytes(path: PathLike) -> bytes:
    """The whole content of the file ``path``."""
    text = os.fspath(path)
    if not is_url(text):
        with open(local(text), "rb") as f:
            return f.read()
    fs, inner = filesystem(text)
    return remote_call(text, lambda: fs.cat_file(inner))


def read_text(path: PathLike, encoding: str = "utf-8") -> str:
    """The content of the text file ``path``."""
    return read_bytes(path).decode(encoding)


def read_range(path: PathLike, offset: int, length: int) -> bytes:
    """The ``length`` bytes of ``path`` from byte ``offset`` (fewer when the file ends
    first); on a remote store one range request."""
    text = os.fspath(path)
    if not is_url(text):
        with open(local(text), "rb") as f:
            f.seek(int(offset))
            return f.read(int(length))
    fs, inner = filesystem(text)
    return remote_call(text, lambda: fs.cat_file(inner, start=int(offset),
                                                 end=int(offset) + int(length)))


def write_bytes(path: PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` (replacing it)."""
    text = os.fspath(path)
    if not is_url(text):
        with open(local(text), "wb") as f:
            f.write(data)
        return
    fs, inner = filesystem(text)
    remote_call(text, lambda: fs.pipe_file(inner, data))


def write_text(path: PathLike, content: str, encoding: str = "utf-8") -> None:
    """Writes ``content`` to ``path`` (replacing it)."""
    write_bytes(path, content.encode(encoding))
