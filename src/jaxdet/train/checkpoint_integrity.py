"""Checksums of a checkpoint's files, written once the checkpoint is complete and checked
before it is read.

Orbax writes a step into a temporary folder and renames it into place when complete, so a
killed writer never leaves a half-written step; what it does not catch is damage afterwards (a
truncated or deleted file, bytes overwritten on a failing disk or by another program). After a
step is complete, :func:`seal` records every file's size and CRC32C in
``jaxdet_checksums.json`` inside it; :func:`damage` compares them again. A step without the
file (written by an older jaxdet, or killed between the rename and the seal) cannot be checked
and is trusted, as before.

A step in a bucket (``gs://``, written there by orbax directly) is recorded and checked from
one listing: GCS keeps every object's size and CRC32C, so sealing and checking read no data.
An object is never half-written there (an upload is all or nothing); what the record catches
is an object deleted or replaced afterwards. Orbax marks a finished step in a bucket with its
``commit_success.txt`` (there is no rename), and lists no step without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import google_crc32c

from jaxdet import files

CHECKSUMS = "jaxdet_checksums.json"
_CHUNK = 1 << 22


def _crc(path: Path) -> str:
    crc = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc.update(chunk)
    return crc.hexdigest().decode()


def _files(step_dir: Path) -> list[Path]:
    return sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != CHECKSUMS)


def _remote_record(step_dir: str) -> dict[str, list]:
    return {rel: [entry["size"], entry["crc32c"]]
            for rel, entry in sorted(files.files_under(step_dir).items()) if rel != CHECKSUMS}


def seal(step_dir: str | Path) -> None:
    """Record the size and CRC32C of every file under ``step_dir`` (a local folder or a
    bucket URL), atomically: a partial record is never left."""
    if files.is_url(step_dir):
        files.write_text(files.join(step_dir, CHECKSUMS),
                         json.dumps(_remote_record(os.fspath(step_dir)), indent=0))
        return
    step_dir = Path(step_dir)
    record = {str(p.relative_to(step_dir)): [p.stat().st_size, _crc(p)]
              for p in _files(step_dir)}
    partial = step_dir / (CHECKSUMS + ".partial")
    partial.write_text(json.dumps(record, indent=0))
    os.replace(partial, step_dir / CHECKSUMS)


def is_sealed(step_dir: str | Path) -> bool:
    return files.isfile(files.join(step_dir, CHECKSUMS))


def damage(step_dir: str | Path) -> str | None:
    """What is wrong with a sealed step (the first damaged file and how), or None when every
    file is as written (or the step is not sealed)."""
    if files.is_url(step_dir):
        return _remote_damage(os.fspath(step_dir))
    step_dir = Path(step_dir)
    if not step_dir.is_dir():  # e.g. set aside by process 0 while another process looked
        return "its folder is gone"
    try:
        record = json.loads((step_dir / CHECKSUMS).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        return f"{CHECKSUMS} cannot be read ({err})"
    for name, (size, crc) in sorted(record.items()):
        path = step_dir / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{name} is {actual:,} bytes, {size:,} when written"
        if _crc(path) != crc:
            return f"{name} does not hold the bytes written (CRC32C differs)"
    return None


def _remote_damage(step_dir: str) -> str | None:
    try:
        record = json.loads(files.read_text(files.join(step_dir, CHECKSUMS)))
    except FileNotFoundError:
        return None if files.exists(step_dir) else "its folder is gone"
    except ValueError as err:
        return f"{CHECKSUMS} cannot be read ({err})"
    now = _remote_record(step_dir)
    for name, (size, crc) in sorted(record.items()):
        if name not in now:
            return f"{name} is missing"
        actual, actual_crc = now[name]
        if actual != size:
            return f"{name} is {actual:,} bytes, {size:,} when written"
        if actual_crc != crc:
            return f"{name} does not hold the bytes written (CRC32C differs)"
    return None


__all__ = ["CHECKSUMS", "damage", "is_sealed", "seal"]
