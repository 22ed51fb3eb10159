"""TFRecord files and ``tf.train.Example`` protos, read and written without TensorFlow.

TFRecord framing, per record (all little-endian)::

    uint64 length
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)`` and crc32c the
Castagnoli CRC (``google-crc32c``). A record's *offset* below is the byte offset of its length
field in the file; its *length* is the length of its data.

``tf.train.Example`` is decoded from the protobuf wire format directly (no generated code)::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }      // entries: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed]; }    // unpacked fixed32 accepted too
    Int64List { repeated int64 value = 1 [packed]; }    // unpacked varints accepted too

Unknown fields are skipped (protobuf semantics); a repeated map key keeps its last value.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import google_crc32c
import numpy as np

from jaxdet import files
from jaxdet.data.records import SkipCounter

logger = logging.getLogger("jaxdet.data")

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_HEADER = 12  # uint64 length + uint32 crc
_FOOTER = 4  # uint32 crc
_RESYNC_CHUNK = 1 << 20

FeatureValue = list[bytes] | np.ndarray


class TfRecordError(ValueError):
    """A TFRecord record that cannot be read; names the file and byte offset."""


class ExampleError(ValueError):
    """Bytes that are not a well-formed ``tf.train.Example``."""


# --------------------------------------------------------------------------- crc + framing


def crc32c(data: bytes | memoryview) -> int:
    """The (unmasked) CRC-32C of ``data``."""
    return google_crc32c.value(bytes(data))


def masked_crc32c(data: bytes | memoryview) -> int:
    """The masked CRC-32C TFRecord stores for ``data``."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def _frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data
            + struct.pack("<I", masked_crc32c(data)))


class TfRecordWriter:
    """Appends framed records to a new file: ``with TfRecordWriter(path) as w: w.write(b)``."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.count = 0
        self._file = files.open_file(self.path, "wb")

    def write(self, data: bytes) -> int:
        """Writes one record; returns its byte offset in the file."""
        offset = self._file.tell()
        self._file.write(_frame(bytes(data)))
        self.count += 1
        return offset

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TfRecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_tfrecord(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """Writes ``records`` (serialized protos, or any bytes) to ``path``; returns how many."""
    with TfRecordWriter(path) as writer:
        for data in records:
            writer.write(data)
    return writer.count


def _header_ok(header: bytes) -> bool:
    return struct.unpack("<I", header[8:12])[0] == masked_crc32c(header[:8])


def iter_tfrecord(
    path: str | os.PathLike, skips: SkipCounter | None = None
) -> Iterator[tuple[int, bytes]]:
    """Yields ``(offset, data)`` for every intact record of ``path``, in file order.

    A record whose data CRC fails is skipped (its length is trusted: its header CRC held).
    A record whose length field fails its CRC, or runs past the end of the file, is skipped
    and the scan looks for the next intact record header after it (resynchronises); when
    there is none, the rest of the file is skipped. Each skip is counted in ``skips`` (one
    WARNING naming the file and byte offset): ``tfrecord_bad_crc``, ``tfrecord_bad_length``,
    ``tfrecord_truncated``.
    """
    path = os.fspath(path)
    skips = skips if skips is not None else SkipCounter()
    size = files.getsize(path)
    with files.open_file(path, "rb") as f:
        pos = 0
        while pos < size:
            f.seek(pos)
            header = f.read(_HEADER)
            if len(header) < _HEADER:
                skips.add("tfrecord_truncated", path, f"byte {pos}",
                          f"{size - pos} bytes at the end are not a whole record header")
                return
            length = struct.unpack("<Q", header[:8])[0]
            end = pos + _HEADER + length + _FOOTER
            if not _header_ok(header) or end > size:
                why = ("length field fails its CRC" if not _header_ok(header)
                       else f"length {length} runs past the end of the file ({size} bytes)")
                nxt = _resync(f, pos + 1, size)
                if nxt is None:
                    skips.add("tfrecord_bad_length", path, f"byte {pos}",
                              f"{why}; no intact record follows: the rest of the file "
                              f"({size - pos} bytes) is skipped")
                    return
                skips.add("tfrecord_bad_length", path, f"byte {pos}",
                          f"{why}; resynchronised at byte {nxt} ({nxt - pos} bytes skipped)")
                pos = nxt
                continue
            body = f.read(length + _FOOTER)
            data = body[:length]
            stored = struct.unpack("<I", body[length:])[0]
            if stored != masked_crc32c(data):
                skips.add("tfrecord_bad_crc", path, f"byte {pos}",
                          f"data CRC mismatch in a {length}-byte record; record skipped")
            else:
                yield pos, data
            pos = end


def _resync(f, start: int, size: int) -> int | None:
    """The offset of the first intact record (header and data CRCs hold) at or after
    ``start``, or None."""
    pos = start
    while pos + _HEADER + _FOOTER <= size:
        f.seek(pos)
        chunk = f.read(_RESYNC_CHUNK + _HEADER)
        last = min(len(chunk) - _HEADER, _RESYNC_CHUNK)
        for i in range(last + 1):
            header = chunk[i:i + _HEADER]
            if not _header_ok(header):
                continue
            offset = pos + i
            length = struct.unpack("<Q", header[:8])[0]
            if offset + _HEADER + length + _FOOTER > size:
                continue
            if _data_ok(f, offset, length):
                return offset
        pos += last + 1
    return None


def _data_ok(f, offset: int, length: int) -> bool:
    f.seek(offset + _HEADER)
    body = f.read(length + _FOOTER)
    return len(body) == length + _FOOTER and (
        struct.unpack("<I", body[length:])[0] == masked_crc32c(body[:length]))


def scan_tfrecord(
    path: str | os.PathLike, skips: SkipCounter | None = None
) -> list[tuple[int, int]]:
    """``(offset, length)`` of every intact record of ``path`` (CRCs verified); bad records
    are skipped and counted as in :func:`iter_tfrecord`."""
    return [(offset, len(data)) for offset, data in iter_tfrecord(path, skips)]


def read_record(path: str | os.PathLike, offset: int, length: int) -> bytes:
    """The data of the record at byte ``offset`` of ``path`` (CRCs verified).

    Raises:
      TfRecordError: naming the file and offset, when the record is not there intact.
    """
    path = os.fspath(path)
    raw = files.read_range(path, offset, _HEADER + length + _FOOTER)
    where = f"{path} [byte {offset}]"
    if len(raw) != _HEADER + length + _FOOTER:
        raise TfRecordError(f"{where}: file ends inside the record")
    if struct.unpack("<Q", raw[:8])[0] != length or not _header_ok(raw[:_HEADER]):
        raise TfRecordError(f"{where}: no record of length {length} starts here")
    data = raw[_HEADER:_HEADER + length]
    if struct.unpack("<I", raw[-_FOOTER:])[0] != masked_crc32c(data):
        raise TfRecordError(f"{where}: data CRC mismatch")
    return data


# --------------------------------------------------------------------------- protobuf wire


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ExampleError(f"truncated or overlong varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Yields (field number, wire type, a, b) over buf[start:end]: for varints a = value,
    for length-delimited / fixed fields [a, b) is the payload's span in ``buf``."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, pos
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise ExampleError(f"field {number}: length {n} runs past its message")
            yield number, wire, pos, pos + n
            pos += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            if pos + n > end:
                raise ExampleError(f"field {number}: truncated fixed{n * 8} value")
            yield number, wire, pos, pos + n
            pos += n
        else:
            raise ExampleError(f"field {number}: unsupported wire type {wire}")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _decode_feature(buf: bytes, start: int, end: int) -> tuple[str, list]:
    """(kind, values) of a Feature: kind 'bytes' (values: [(start, end)] spans in ``buf``),
    'float' or 'int64' (values: numbers)."""
    kind, values = "bytes", []
    for number, wire, a, b in _fields(buf, start, end):
        if wire != 2 or number not in (1, 2, 3):
            continue
        new_kind = ("bytes", "float", "int64")[number - 1]
        if new_kind != kind:  # oneof: a later kind replaces an earlier one
            kind, values = new_kind, []
        for vnum, vwire, c, d in _fields(buf, a, b):
            if vnum != 1:
                continue
            if kind == "bytes":
                if vwire != 2:
                    raise ExampleError("BytesList.value must be length-delimited")
                values.append((c, d))
            elif kind == "float":
                if vwire == 2:
                    if (d - c) % 4:
                        raise ExampleError("packed FloatList length is not a multiple of 4")
                    values.extend(np.frombuffer(buf[c:d], "<f4").tolist())
                elif vwire == 5:
                    values.append(struct.unpack("<f", buf[c:d])[0])
                else:
                    raise ExampleError(f"FloatList.value has wire type {vwire}")
            else:
                if vwire == 2:
                    p = c
                    while p < d:
                        v, p = _varint(buf, p, d)
                        values.append(_signed64(v))
                elif vwire == 0:
                    values.append(_signed64(c))
                else:
                    raise ExampleError(f"Int64List.value has wire type {vwire}")
    return kind, values


def decode_example_spans(data: bytes) -> dict[str, tuple[str, list]]:
    """Like :func:`parse_example`, but bytes values are (start, end) spans into ``data``
    (so a caller can locate, e.g., the encoded image inside the record) and numbers are
    Python lists: {key: (kind, values)} with kind 'bytes' | 'float' | 'int64'."""
    out: dict[str, tuple[str, list]] = {}
    end = len(data)
    for number, wire, a, b in _fields(data, 0, end):
        if number != 1 or wire != 2:
            continue
        for fnum, fwire, c, d in _fields(data, a, b):
            if fnum != 1 or fwire != 2:
                continue
            key, feature = "", None
            for enum, ewire, e, g in _fields(data, c, d):
                if enum == 1 and ewire == 2:
                    try:
                        key = bytes(data[e:g]).decode("utf-8")
                    except UnicodeDecodeError:
                        raise ExampleError("feature key is not UTF-8") from None
                elif enum == 2 and ewire == 2:
                    feature = (e, g)
            out[key] = _decode_feature(data, *feature) if feature else ("bytes", [])
    return out


def parse_example(data: bytes) -> dict[str, FeatureValue]:
    """Decodes a serialized ``tf.train.Example``.

    Returns:
      {feature key: list[bytes] (BytesList) | float32 [n] (FloatList) | int64 [n]
      (Int64List)}; a Feature with no list set decodes as an empty list of bytes.
    Raises:
      ExampleError: the bytes are not a well-formed Example.
    """
    data = bytes(data)
    out: dict[str, FeatureValue] = {}
    for key, (kind, values) in decode_example_spans(data).items():
        if kind == "bytes":
            out[key] = [data[a:b] for a, b in values]
        elif kind == "float":
            out[key] = np.asarray(values, np.float32)
        else:
            out[key] = np.asarray(values, np.int64)
    return out


# --------------------------------------------------------------------------- encode


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _put_bytes(out: bytearray, number: int, payload: bytes | bytearray) -> None:
    _put_varint(out, number << 3 | 2)
    _put_varint(out, len(payload))
    out += payload


def _feature_kind(value: Any) -> tuple[str, list]:
    if isinstance(value, (bytes, str, int, float, np.generic)):
        value = [value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            return "float", value.reshape(-1).astype(np.float32).tolist()
        if value.dtype.kind in "iub":
            return "int64", [int(v) for v in value.reshape(-1)]
        if value.dtype.kind in "SUO":
            value = value.reshape(-1).tolist()
        else:
            raise TypeError(f"cannot encode an array of dtype {value.dtype}")
    items = list(value)
    if all(isinstance(v, (bytes, bytearray, str)) for v in items):
        return "bytes", [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in items]
    if all(isinstance(v, (bool, int, np.integer)) for v in items):
        return "int64", [int(v) for v in items]
    if all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in items):
        return "float", [float(v) for v in items]
    raise TypeError(f"cannot encode feature values {items[:3]!r}: mix of types")


def encode_example(features: dict[str, Any]) -> bytes:
    """Serializes a ``tf.train.Example``.

    Values: a list of bytes / str (BytesList; str is UTF-8 encoded), a float array or list of
    floats (FloatList, packed float32), an int array or list of ints (Int64List, packed
    varints). A scalar is a one-element list; an empty Python list is an empty BytesList
    (pass a typed numpy array for an empty float or int64 list).
    """
    features_msg = bytearray()
    for key, value in features.items():
        kind, items = _feature_kind(value)
        inner = bytearray()
        if kind == "bytes":
            for item in items:
                _put_bytes(inner, 1, item)
        elif kind == "float":
            if items:
                _put_bytes(inner, 1, np.asarray(items, "<f4").tobytes())
        else:
            packed = bytearray()
            for item in items:
                _put_varint(packed, item)
            if items:
                _put_bytes(inner, 1, packed)
        feature = bytearray()
        _put_bytes(feature, {"bytes": 1, "float": 2, "int64": 3}[kind], inner)
        entry = bytearray()
        _put_bytes(entry, 1, str(key).encode("utf-8"))
        _put_bytes(entry, 2, feature)
        _put_bytes(features_msg, 1, entry)
    example = bytearray()
    _put_bytes(example, 1, features_msg)
    return bytes(example)


__all__ = ["ExampleError", "TfRecordError", "TfRecordWriter", "crc32c", "decode_example_spans",
           "encode_example", "iter_tfrecord", "masked_crc32c", "parse_example", "read_record",
           "scan_tfrecord", "write_tfrecord"]
