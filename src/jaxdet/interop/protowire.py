"""Protocol-buffer wire format, read without the protobuf package (for TF checkpoint metadata).

A message is a sequence of fields ``(field_number, wire_type, value)``: wire type 0 is a
varint (returned as int), 1 a little-endian 64-bit word (int), 2 length-delimited (bytes: a
string, bytes, a sub-message or a packed repeated field), 5 a 32-bit word (int). Groups
(wire types 3/4) are obsolete and refused.

    for number, wire, value in fields(data): ...
    msg = parse(data)            # {field_number: [values, ...]}
    first_int(msg, 1), first_bytes(msg, 2), submessages(msg, 3)

and written: ``varint_field(1, 7) + bytes_field(2, b"...") + fixed32_field(6, crc)``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator


class WireError(ValueError):
    """Bytes that are not a valid protocol-buffer message."""


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, new position) of the varint at ``data[pos:]`` (at most 10 bytes)."""
    result = shift = 0
    for i in range(10):
        if pos + i >= len(data):
            raise WireError(f"varint runs past the end at byte {pos}")
        byte = data[pos + i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos + i + 1
        shift += 7
    raise WireError(f"varint longer than 10 bytes at byte {pos}")


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int, int | bytes]]:
    """The fields of a message, in the order they are stored."""
    data = memoryview(data)
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise WireError(f"64-bit field {number} runs past the end")
            (value,) = struct.unpack_from("<Q", data, pos)
            pos += 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise WireError(f"field {number} of {length} bytes runs past the end")
            value = bytes(data[pos:pos + length])
            pos += length
        elif wire == 5:
            if pos + 4 > len(data):
                raise WireError(f"32-bit field {number} runs past the end")
            (value,) = struct.unpack_from("<I", data, pos)
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire} (field {number})")
        yield number, wire, value


def parse(data: bytes | memoryview) -> dict[int, list]:
    """``{field_number: [value, ...]}`` in stored order (repeated fields keep every value)."""
    out: dict[int, list] = {}
    for number, _, value in fields(data):
        out.setdefault(number, []).append(value)
    return out


def first_int(msg: dict[int, list], number: int, default: int = 0) -> int:
    """The last value of a varint field (proto3: the last one wins), or ``default``."""
    values = msg.get(number)
    return int(values[-1]) if values else default


def signed64(value: int) -> int:
    """An int64 field's varint as a signed value (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def first_bytes(msg: dict[int, list], number: int, default: bytes = b"") -> bytes:
    values = msg.get(number)
    return bytes(values[-1]) if values else default


def submessages(msg: dict[int, list], number: int) -> list[dict[int, list]]:
    """Every value of a repeated (or single) message field, each parsed."""
    return [parse(v) for v in msg.get(number, [])]


# --------------------------------------------------------------------------- writing


def varint(value: int) -> bytes:
    """``value`` (a non-negative int, or a negative int64 as its two's complement) as a
    varint."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """Field ``number`` as a varint (wire type 0)."""
    return varint(number << 3) + varint(value)


def bytes_field(number: int, data: bytes) -> bytes:
    """Field ``number`` length-delimited (wire type 2): bytes, a string or a sub-message."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def fixed32_field(number: int, value: int) -> bytes:
    """Field ``number`` as a little-endian 32-bit word (wire type 5)."""
    return varint(number << 3 | 5) + struct.pack("<I", value & 0xFFFFFFFF)


__all__ = ["WireError", "bytes_field", "fields", "first_bytes", "first_int", "fixed32_field",
           "parse", "read_varint", "signed64", "submessages", "varint", "varint_field"]
