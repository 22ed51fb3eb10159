"""The TF2 checkpoint reader on a checkpoint written by real TensorFlow
(fixtures/make_tf_formats_fixture.py): every dtype, nested objects, a variable reachable by two
paths; and corrupt files, each refused with the file and the record named."""

from __future__ import annotations

import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from jaxdet.interop.tf_checkpoint import CheckpointError, TfCheckpoint, resolve_prefix

FIXTURE = Path(__file__).parent / "fixtures" / "tf_formats"
V = "/.ATTRIBUTES/VARIABLE_VALUE"


def key(path: str) -> str:
    return f"model/{path}{V}"


def test_every_dtype_reads_as_written():
    ckpt = TfCheckpoint(FIXTURE / "ckpt")
    six = np.arange(6, dtype=np.float64).reshape(2, 3)
    expected = {
        "inner/kernel": (six / 8).astype(np.float32),
        "also": np.array([1.5, -2.5], np.float32),  # also model/inner/shared: stored once
        "f64": np.array([0.1, 0.2, 0.3, 0.4]),
        "f16": (six.T - 2.5).astype(np.float16),
        "bf16": np.array([1.0, 2.0, 3.0, 0.5, -4.0], ml_dtypes.bfloat16),
        "i8": np.array([-128, 0, 127], np.int8),
        "i16": np.array([-300, 300], np.int16),
        "i32": np.array([[7]], np.int32),
        "i64": np.array(2**40 + 3, np.int64),
        "u8": np.array([0, 255, 16], np.uint8),
        "flags": np.array([True, False, True]),
        "c64": np.array([1 + 2j, -3j], np.complex64),
        "empty": np.zeros((0, 4), np.float32),
    }
    for path, want in expected.items():
        got = ckpt.read(key(path))
        assert got.dtype == want.dtype and got.shape == want.shape, path
        np.testing.assert_array_equal(got, want, err_msg=path)
        assert ckpt.shape(key(path)) == want.shape
    assert ckpt.read(key("word")).item() == b"jaxdet"
    assert ckpt.read(key("words")).tolist() == [b"", b"a", b"\xff\x00bytes"]
    assert "save_counter/.ATTRIBUTES/VARIABLE_VALUE" not in ckpt  # write(), not save()


def test_object_graph_gives_every_path_to_a_variable():
    ckpt = TfCheckpoint(FIXTURE / "ckpt")
    paths = ckpt.variables()
    # the shared variable is stored once, under one path, and reached by both
    assert paths["model/also"] == paths["model/inner/shared"] == key("also")
    np.testing.assert_array_equal(ckpt.read(paths["model/inner/shared"]), [1.5, -2.5])
    assert paths["model/inner/kernel"] == key("inner/kernel")
    assert set(paths.values()) == {k for k in ckpt.keys() if k.endswith(V)}


def test_prefix_index_data_file_and_folder_all_resolve(tmp_path):
    prefix = FIXTURE / "ckpt"
    for given in (prefix, f"{prefix}.index", f"{prefix}.data-00000-of-00001", FIXTURE):
        assert resolve_prefix(given) == str(prefix), given
    with pytest.raises(FileNotFoundError, match="nothere.index does not exist"):
        TfCheckpoint(tmp_path / "nothere")


def test_a_checkpoint_in_a_bucket_reads_as_on_disk_by_ranges(gcs):
    """A TF checkpoint folder in GCS (the emulator): the folder, prefix and index resolve as
    on disk, and every tensor reads the same, fetched by its byte range."""
    folder = gcs.upload(FIXTURE, "tf_formats")
    local = TfCheckpoint(FIXTURE / "ckpt")
    for given in (folder, f"{folder}/ckpt", f"{folder}/ckpt.index"):
        assert resolve_prefix(given) == f"{folder}/ckpt", given
    remote = TfCheckpoint(f"{folder}/ckpt")
    assert remote.keys() == local.keys()
    for name in local.keys():
        np.testing.assert_array_equal(remote.read(name), local.read(name))
    with pytest.raises(FileNotFoundError, match="nothere.index does not exist"):
        TfCheckpoint(f"{folder}/nothere")


def _copy(tmp_path) -> Path:
    for f in FIXTURE.glob("ckpt*"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / "ckpt"


def test_truncated_data_shard_names_the_file_and_tensor(tmp_path):
    prefix = _copy(tmp_path)
    ckpt = TfCheckpoint(prefix)
    entry = max(ckpt.entries.values(), key=lambda e: e.offset + e.size)
    data = prefix.with_name("ckpt.data-00000-of-00001")
    data.write_bytes(data.read_bytes()[:entry.offset + entry.size - 1])
    with pytest.raises(CheckpointError) as info:
        TfCheckpoint(prefix).read(entry.key)
    assert "ckpt.data-00000-of-00001" in str(info.value) and entry.key in str(info.value)
    assert "truncated" in str(info.value)


def test_flipped_byte_fails_the_crc_of_that_tensor_only(tmp_path):
    prefix = _copy(tmp_path)
    entry = TfCheckpoint(prefix).entries[key("inner/kernel")]
    data = prefix.with_name("ckpt.data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[entry.offset + 5] ^= 0x10
    data.write_bytes(bytes(raw))
    ckpt = TfCheckpoint(prefix)
    with pytest.raises(CheckpointError, match=r"inner/kernel.*fails its CRC32C check"):
        ckpt.read(key("inner/kernel"))
    np.testing.assert_array_equal(ckpt.read(key("u8")), [0, 255, 16])  # others still read


def test_index_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "x.index").write_text("model_checkpoint_path: 'ckpt-0'\n" * 4)
    with pytest.raises(CheckpointError, match="x.index.*not a TensorFlow checkpoint index"):
        TfCheckpoint(tmp_path / "x")
    (tmp_path / "y.index").write_bytes(b"")
    with pytest.raises(CheckpointError, match="too short"):
        TfCheckpoint(tmp_path / "y")


def test_corrupt_index_block_and_missing_shard(tmp_path):
    prefix = _copy(tmp_path)
    index = prefix.with_name("ckpt.index")
    raw = bytearray(index.read_bytes())
    raw[10] ^= 0x01  # inside the first data block
    index.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="block at byte 0 fails its CRC32C check"):
        TfCheckpoint(prefix)
    prefix = _copy(tmp_path)
    prefix.with_name("ckpt.data-00000-of-00001").unlink()
    with pytest.raises(CheckpointError, match="data shard ckpt.data-00000-of-00001 is missing"):
        TfCheckpoint(prefix).read(key("u8"))


def test_written_local_names_with_slashes_and_dots_and_slots_read_back(tmp_path):
    """A local name holding ``/`` (CenterNet's ``box/scale`` head, one dict key) is one object
    in the written graph and ``.S`` in TF's key, a ``.`` doubles, as TF escapes them; an
    optimizer slot is referenced by the optimizer's node and keyed as TF keys slots. (TF 2.21
    restored a CenterNet written this way with every object matched: the development record.)"""
    from jaxdet.interop.tf_checkpoint_writer import write_tf_checkpoint
    from jaxdet.interop.tf_import import slot_key

    kernel = np.arange(4, dtype=np.float32).reshape(2, 2)
    prefix = write_tf_checkpoint(
        tmp_path / "ckpt-1",
        {"model/heads/box.Sscale/0/kernel": kernel, "model/v1.5/bias": np.ones(2, np.float32),
         "optimizer/iter": np.int64(7)},
        slots={("model/heads/box.Sscale/0/kernel", "optimizer", "momentum"): -kernel})
    ckpt = TfCheckpoint(prefix)
    paths = ckpt.variables()
    assert paths["model/heads/box.Sscale/0/kernel"] == f"model/heads/box.Sscale/0/kernel{V}"
    assert paths["model/v1.5/bias"] == f"model/v1..5/bias{V}"
    nodes = ckpt.object_graph()
    heads = next(child for child, name in nodes[0]["children"] if name == "model")
    heads = next(child for child, name in nodes[heads]["children"] if name == "heads")
    assert [name for _, name in nodes[heads]["children"]] == ["box/scale"]
    np.testing.assert_array_equal(
        ckpt.read(slot_key(paths["model/heads/box.Sscale/0/kernel"], "momentum")), -kernel)
    assert ckpt.read(paths["optimizer/iter"]) == 7
