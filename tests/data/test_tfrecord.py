"""TFRecord framing and tf.train.Example wire format, written and read without TensorFlow."""

import logging
import struct
from pathlib import Path

import numpy as np
import pytest

from jaxdet.data.records import SkipCounter
from jaxdet.data.tfrecord import (
    ExampleError,
    TfRecordError,
    crc32c,
    encode_example,
    iter_tfrecord,
    masked_crc32c,
    parse_example,
    read_record,
    scan_tfrecord,
    write_tfrecord,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
PETS = SHARED / "tfod" / "pets_examples.record"


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_known_vectors():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert masked_crc32c(b"123456789") == _mask(0xE3069283)
    assert masked_crc32c(b"") == 0xA282EAD8  # crc32c("") = 0


def test_framing_bytes_by_hand(tmp_path):
    path = tmp_path / "one.tfrecord"
    assert write_tfrecord(path, [b"abc"]) == 1
    raw = path.read_bytes()
    length = struct.pack("<Q", 3)
    assert raw == (length + struct.pack("<I", _mask(crc32c(length))) + b"abc"
                   + struct.pack("<I", _mask(crc32c(b"abc"))))
    assert scan_tfrecord(path) == [(0, 3)]
    assert read_record(path, 0, 3) == b"abc"


def _write(tmp_path, n=5):
    path = tmp_path / "data.tfrecord"
    payloads = [bytes([65 + i]) * (10 + 7 * i) for i in range(n)]
    write_tfrecord(path, payloads)
    offsets, pos = [], 0
    for p in payloads:
        offsets.append(pos)
        pos += 16 + len(p)
    return path, payloads, offsets


def test_scan_and_read_back(tmp_path):
    path, payloads, offsets = _write(tmp_path)
    assert scan_tfrecord(path) == [(o, len(p)) for o, p in zip(offsets, payloads, strict=True)]
    for o, p in zip(offsets, payloads, strict=True):
        assert read_record(path, o, len(p)) == p
    with pytest.raises(TfRecordError, match=rf"data\.tfrecord \[byte {offsets[1] + 1}\]"):
        read_record(path, offsets[1] + 1, len(payloads[1]))


def test_flipped_data_byte_skips_one_record_naming_file_and_offset(tmp_path, caplog):
    path, payloads, offsets = _write(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[offsets[2] + 12 + 3] ^= 0x40  # inside record 2's data
    path.write_bytes(bytes(raw))
    skips = SkipCounter()
    with caplog.at_level(logging.WARNING, "jaxdet.data"):
        got = list(iter_tfrecord(path, skips))
    assert [d for _, d in got] == payloads[:2] + payloads[3:]
    assert skips.as_dict() == {"tfrecord_bad_crc": 1}
    assert f"{path} [byte {offsets[2]}]" in caplog.text and "CRC" in caplog.text
    with pytest.raises(TfRecordError, match="data CRC mismatch"):
        read_record(path, offsets[2], len(payloads[2]))


def test_corrupt_length_field_resynchronises(tmp_path, caplog):
    path, payloads, offsets = _write(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[offsets[1] + 2] = 0x7F  # length becomes huge; its CRC no longer holds
    path.write_bytes(bytes(raw))
    skips = SkipCounter()
    with caplog.at_level(logging.WARNING, "jaxdet.data"):
        got = scan_tfrecord(path, skips)
    assert got == [(o, len(p)) for i, (o, p) in enumerate(zip(offsets, payloads, strict=True))
                   if i != 1]
    assert skips.as_dict() == {"tfrecord_bad_length": 1}
    assert f"{path} [byte {offsets[1]}]" in caplog.text
    assert f"resynchronised at byte {offsets[2]}" in caplog.text


def test_corrupt_last_length_skips_rest_of_file(tmp_path, caplog):
    path, payloads, offsets = _write(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[offsets[4]] ^= 0x01
    path.write_bytes(bytes(raw))
    skips = SkipCounter()
    with caplog.at_level(logging.WARNING, "jaxdet.data"):
        got = scan_tfrecord(path, skips)
    assert [o for o, _ in got] == offsets[:4]
    assert skips.as_dict() == {"tfrecord_bad_length": 1}
    assert "rest of the file" in caplog.text and f"byte {offsets[4]}" in caplog.text


def test_truncated_file(tmp_path):
    path, payloads, offsets = _write(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[: offsets[4] + 20])  # header intact, data cut short
    skips = SkipCounter()
    assert [o for o, _ in scan_tfrecord(path, skips)] == offsets[:4]
    assert skips.total == 1
    path.write_bytes(raw[: offsets[4] + 5])  # not even a whole header
    skips = SkipCounter()
    assert [o for o, _ in scan_tfrecord(path, skips)] == offsets[:4]
    assert skips.as_dict() == {"tfrecord_truncated": 1}


# --------------------------------------------------------------------------- Example


def _ld(number: int, payload: bytes) -> bytes:
    """A length-delimited field with a one-byte tag and length (enough for these tests)."""
    assert number < 16 and len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _entry(key: bytes, feature: bytes) -> bytes:
    return _ld(1, _ld(1, key) + _ld(2, feature))


def test_parse_hand_built_example():
    ints = b"\x01" + b"\xff" * 9 + b"\x01" + b"\xac\x02"  # 1, -1, 300 as packed varints
    floats = struct.pack("<2f", 0.5, -2.25)
    packed = (
        _entry(b"b", _ld(1, _ld(1, b"xy") + _ld(1, b"")))
        + _entry(b"f", _ld(2, _ld(1, floats)))
        + _entry(b"i", _ld(3, _ld(1, ints)))
    )
    others = (  # unpacked encodings are accepted too: fixed32 floats, varint int64s
        _entry(b"fu", _ld(2, b"\x0d" + struct.pack("<f", 1.5) + b"\x0d"
                          + struct.pack("<f", 3.0)))
        + _entry(b"iu", _ld(3, b"\x08\x05\x08\x00"))
        + _entry(b"empty", b"")
    )
    example = _ld(1, packed + others) + b"\x10\x07"  # plus an unknown varint field: skipped
    out = parse_example(example)
    assert out["b"] == [b"xy", b""]
    np.testing.assert_array_equal(out["f"], np.array([0.5, -2.25], np.float32))
    assert out["f"].dtype == np.float32
    np.testing.assert_array_equal(out["i"], [1, -1, 300])
    assert out["i"].dtype == np.int64
    np.testing.assert_array_equal(out["fu"], [1.5, 3.0])
    np.testing.assert_array_equal(out["iu"], [5, 0])
    assert out["empty"] == []
    # encode writes exactly these bytes for the packed features, in the given order
    assert encode_example({"b": [b"xy", b""], "f": np.array([0.5, -2.25], np.float32),
                           "i": np.array([1, -1, 300])}) == _ld(1, packed)


def test_round_trip():
    features = {
        "image/encoded": [bytes(range(256)) * 3],
        "image/filename": ["ünïcode.jpg"],
        "image/height": np.array([480], np.int64),
        "big": np.array([2**62, -(2**63), 0, 127, 128], np.int64),
        "image/object/bbox/ymin": np.array([0.1, 0.25, 1.0], np.float32),
        "empty_f": np.zeros((0,), np.float32),
        "empty_i": np.zeros((0,), np.int64),
        "flags": [True, False],
    }
    out = parse_example(encode_example(features))
    assert out["image/encoded"] == features["image/encoded"]
    assert out["image/filename"] == ["ünïcode.jpg".encode()]
    np.testing.assert_array_equal(out["big"], features["big"])
    np.testing.assert_array_equal(out["image/object/bbox/ymin"],
                                  features["image/object/bbox/ymin"])
    assert out["empty_f"].dtype == np.float32 and out["empty_f"].size == 0
    assert out["empty_i"].dtype == np.int64 and out["empty_i"].size == 0
    np.testing.assert_array_equal(out["flags"], [1, 0])
    assert parse_example(encode_example({})) == {}


@pytest.mark.parametrize("bad", [b"\x0a\x05\x0a", b"\x0a", b"\x0f\x00", b"\x0a\x02\x0a\x7f"])
def test_malformed_example_raises(bad):
    with pytest.raises(ExampleError):
        parse_example(bad)


def _reference_example_class():
    """tf.train.Example built from a hand-written descriptor (protobuf as a reference)."""
    pb = pytest.importorskip("google.protobuf")
    del pb
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="jaxdet_ref_example.proto",
                                             package="jaxdet_ref", syntax="proto3")

    def message(name, parent=None):
        m = (parent.nested_type if parent else fdp.message_type).add()
        m.name = name
        return m

    def field(m, name, number, kind, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
        f = m.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof
        return f

    for name, kind in (("BytesList", F.TYPE_BYTES), ("FloatList", F.TYPE_FLOAT),
                       ("Int64List", F.TYPE_INT64)):
        field(message(name), "value", 1, kind, F.LABEL_REPEATED)
    feature = message("Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in ((1, "bytes_list"), (2, "float_list"), (3, "int64_list")):
        camel = {"bytes_list": "BytesList", "float_list": "FloatList",
                 "int64_list": "Int64List"}[name]
        field(feature, name, number, F.TYPE_MESSAGE, type_name=f".jaxdet_ref.{camel}", oneof=0)
    features = message("Features")
    entry = message("FeatureEntry", features)
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_MESSAGE, type_name=".jaxdet_ref.Feature")
    field(features, "feature", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED,
          type_name=".jaxdet_ref.Features.FeatureEntry")
    field(message("Example"), "features", 1, F.TYPE_MESSAGE, type_name=".jaxdet_ref.Features")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("jaxdet_ref.Example"))


def test_against_protobuf_reference():
    Example = _reference_example_class()
    ref = Example()
    ref.features.feature["img"].bytes_list.value.extend([b"\x00\x01", b"jpeg"])
    ref.features.feature["box"].float_list.value.extend([0.125, 0.5, 1e-8])
    ref.features.feature["label"].int64_list.value.extend([3, -7, 2**40])
    out = parse_example(ref.SerializeToString())
    assert out["img"] == [b"\x00\x01", b"jpeg"]
    np.testing.assert_array_equal(out["box"], np.array([0.125, 0.5, 1e-8], np.float32))
    np.testing.assert_array_equal(out["label"], [3, -7, 2**40])

    ours = Example.FromString(encode_example(
        {"img": [b"\x00\x01", b"jpeg"], "box": np.array([0.125, 0.5, 1e-8], np.float32),
         "label": [3, -7, 2**40]}))
    assert ours == ref


@pytest.mark.skipif(not PETS.is_file(), reason="../shared/data not present")
def test_pets_record_file():
    skips = SkipCounter()
    records = list(iter_tfrecord(PETS, skips))
    assert len(records) == 10 and skips.total == 0
    for _, data in records:
        ex = parse_example(data)
        assert ex["image/format"] == [b"jpeg"]
        assert ex["image/encoded"][0][:2] == b"\xff\xd8"
        n = len(ex["image/object/class/label"])
        assert n >= 1 and all(len(ex[f"image/object/bbox/{k}"]) == n
                              for k in ("ymin", "xmin", "ymax", "xmax"))
