"""The immutable sorted table (LevelDB's format) that holds a TF checkpoint's ``.index``.

Layout, from the end of the file: a 48-byte footer (the metaindex and index block handles as
varints, zero padding, the 8-byte magic ``0xdb4775248b80fb57``). The index block maps a key
separator to the handle (offset, size varints) of each data block. A block is a run of
entries ``shared_len, unshared_len, value_len`` (varints), the key's unshared suffix and the
value; then ``uint32`` restart offsets and their count. Every block is followed by a 5-byte
trailer: its compression type (0 none, 1 snappy) and the masked CRC32C of the block and that
type byte (TF checkpoints never compress). Every CRC is checked; a mismatch names the file and
the block's offset.

:func:`write_table` writes one (for a checkpoint jaxdet writes): data blocks of about
``BLOCK_SIZE`` bytes, every entry a restart point (no shared key prefixes), an empty metaindex.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c

from jaxdet.interop.protowire import WireError, read_varint, varint

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
TRAILER_SIZE = 5
BLOCK_SIZE = 4096  # LevelDB's default: a data block is closed once it reaches this size


class TableError(ValueError):
    """A file that is not a valid sorted table, or a corrupt one."""


def masked_crc32c(data: bytes | memoryview) -> int:
    """TF/LevelDB's masked CRC32C: rotate right by 15 and add 0xa282ead8 (mod 2**32)."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _block(data: memoryview, handle: bytes | memoryview, name: str, what: str) -> bytes:
    try:
        offset, pos = read_varint(handle, 0)
        size, _ = read_varint(handle, pos)
    except WireError as e:
        raise TableError(f"{name}: bad {what} block handle ({e})") from None
    end = offset + size
    if end + TRAILER_SIZE > len(data):
        raise TableError(f"{name}: {what} block at byte {offset} ({size} bytes) runs past the "
                         f"end of the {len(data)}-byte file: the file is truncated")
    contents = data[offset:end]
    kind = data[end]
    (stored,) = struct.unpack_from("<I", data, end + 1)
    if masked_crc32c(bytes(contents) + bytes([kind])) != stored:
        raise TableError(f"{name}: {what} block at byte {offset} fails its CRC32C check: the "
                         "file is corrupt")
    if kind != 0:  # TF's bundle writer never compresses; 1 would be snappy (LevelDB)
        raise TableError(f"{name}: {what} block at byte {offset} is compressed (type {kind}); "
                         "TensorFlow checkpoints are not, so this is not one jaxdet can read")
    return bytes(contents)


def _entries(block: bytes, name: str) -> Iterator[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise TableError(f"{name}: block of {len(block)} bytes is too short")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 * (num_restarts + 1)
    if limit < 0:
        raise TableError(f"{name}: block restart array larger than the block")
    pos, key = 0, b""
    try:
        while pos < limit:
            shared, pos = read_varint(block, pos)
            unshared, pos = read_varint(block, pos)
            value_len, pos = read_varint(block, pos)
            if shared > len(key) or pos + unshared + value_len > limit:
                raise TableError(f"{name}: malformed block entry at byte {pos}")
            key = key[:shared] + block[pos:pos + unshared]
            pos += unshared
            yield key, block[pos:pos + value_len]
            pos += value_len
    except WireError as e:
        raise TableError(f"{name}: malformed block entry ({e})") from None


def read_table(data: bytes | memoryview, name: str = "table") -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a sorted table, in key order. ``name`` is used in errors.

    Raises:
      TableError: not a table (no footer magic), a block CRC mismatch, a truncated file.
    """
    data = memoryview(data)
    if len(data) < FOOTER_SIZE:
        raise TableError(f"{name}: {len(data)} bytes is too short for a table footer: not a "
                         "TensorFlow checkpoint index")
    footer = data[len(data) - FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, FOOTER_SIZE - 8)
    if magic != TABLE_MAGIC:
        raise TableError(f"{name}: no table magic number at the end: not a TensorFlow "
                         "checkpoint index")
    try:
        _, pos = read_varint(footer, 0)  # metaindex offset
        _, pos = read_varint(footer, pos)  # metaindex size (no filters in TF checkpoints)
    except WireError as e:
        raise TableError(f"{name}: bad footer ({e})") from None
    index = _block(data, footer[pos:], name, "index")
    out = []
    for _, handle in _entries(index, name):
        out.extend(_entries(_block(data, handle, name, "data"), name))
    return out


def _block_bytes(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A block of ``entries``, each a restart point: ``0, len(key), len(value)`` varints, the
    key and the value; then the restart offsets and their count (uint32 each)."""
    body, restarts = bytearray(), []
    for key, value in entries:
        restarts.append(len(body))
        body += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    restarts = restarts or [0]  # an empty block still has one restart point
    return bytes(body) + struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack(
        "<I", len(restarts))


def write_table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """The sorted table of ``entries`` ((key, value) pairs, keys strictly increasing as
    bytes), as :func:`read_table` and LevelDB / TensorFlow read it.

    Raises:
      ValueError: keys not strictly increasing."""
    if any(a[0] >= b[0] for a, b in zip(entries, entries[1:], strict=False)):
        raise ValueError("write_table: keys must be strictly increasing")
    out = bytearray()

    def append_block(block: bytes) -> bytes:
        handle = varint(len(out)) + varint(len(block))
        out.extend(block + b"\x00" + struct.pack("<I", masked_crc32c(block + b"\x00")))
        return handle

    index, pending, size = [], [], 0
    for key, value in entries:
        pending.append((key, value))
        size += len(key) + len(value) + 7
        if size >= BLOCK_SIZE:
            index.append((key, append_block(_block_bytes(pending))))
            pending, size = [], 0
    if pending:
        index.append((pending[-1][0], append_block(_block_bytes(pending))))
    metaindex = append_block(_block_bytes([]))
    index_handle = append_block(_block_bytes(index))
    handles = metaindex + index_handle
    out += handles + bytes(FOOTER_SIZE - 8 - len(handles)) + struct.pack("<Q", TABLE_MAGIC)
    return bytes(out)


__all__ = ["BLOCK_SIZE", "TableError", "masked_crc32c", "read_table", "write_table"]
