"""Writing a TF2 object-based checkpoint without TensorFlow: what ``tf.train.Checkpoint``
writes and restores (the v2 tensor bundle ``PREFIX.index`` + ``PREFIX.data-00000-of-00001``,
with its ``_CHECKPOINTABLE_OBJECT_GRAPH``).

    write_tf_checkpoint("out/ckpt-1", {"model/_box_predictor/.../kernel": array,
                                       "step": np.int64(600)})

Each variable is named by its object path from the checkpoint's root, local names joined by
``/`` (as ``TfCheckpoint.variables()`` lists them and the TF name maps give them): the object
graph is the tree of those paths, each variable a leaf with its ``VARIABLE_VALUE`` attribute,
saved under TF's key (local names escaped, ``.`` -> ``..``, ``/`` -> ``.S``, then
``/.ATTRIBUTES/VARIABLE_VALUE``). TF restores it by matching the tree's names against the
objects' dependencies, as it restores its own checkpoints. The index is a LevelDB table
(``interop.sstable.write_table``): the bundle header under the empty key, then one
``BundleEntryProto`` per tensor (dtype, shape, offset, size, masked CRC32C of its bytes).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping

import numpy as np

from jaxdet import files
from jaxdet.interop import protowire as pw
from jaxdet.interop.sstable import masked_crc32c, write_table
from jaxdet.interop.tf_checkpoint import DT_STRING, DTYPES, OBJECT_GRAPH_KEY, VARIABLE_SUFFIX

TF_DTYPE = {dtype: number for number, dtype in DTYPES.items() if number != DT_STRING}


def _local_names(path: str) -> list[str]:
    """The local names of object path ``path`` (``tf_checkpoint.local_name``: ``.S`` inside a
    component is a ``/`` of the name)."""
    return [name.replace(".S", "/") for name in path.split("/")]


def _escape(local_name: str) -> str:
    return local_name.replace(".", "..").replace("/", ".S")


def checkpoint_key(path: str) -> str:
    """TF's key of the variable at object path ``path`` (local names joined by ``/``)."""
    return "/".join(_escape(name) for name in _local_names(path)) + VARIABLE_SUFFIX


def slot_checkpoint_key(path: str, owner: str, slot: str) -> str:
    """TF's key of optimizer slot ``slot`` (``momentum``, ``m``, ``average``, ...) of the
    variable at object path ``path``, held by the optimizer at object path ``owner``
    (``optimizer``; under TF's moving average, ``optimizer/ema_base_optimizer`` for the base
    optimizer's own slots)."""
    return (checkpoint_key(path).removesuffix(VARIABLE_SUFFIX) + "/.OPTIMIZER_SLOT/"
            + "/".join(_escape(name) for name in _local_names(owner)) + f"/{_escape(slot)}"
            + VARIABLE_SUFFIX)


def _attribute(full_name: str, key: str) -> bytes:
    return pw.bytes_field(2, pw.bytes_field(1, b"VARIABLE_VALUE")
                          + pw.bytes_field(2, full_name.encode())
                          + pw.bytes_field(3, key.encode()))


def object_graph(paths: list[str], full_names: Mapping[str, str] | None = None,
                 slots: list[tuple[str, str, str]] = ()) -> bytes:
    """The serialized ``TrackableObjectGraph`` of variables at ``paths``: node 0 the root,
    one node per path prefix (breadth first), each variable's node with its
    ``VARIABLE_VALUE`` attribute (``full_name``: ``full_names[path]``, else the path); then
    one node per optimizer slot of ``slots`` (``(variable path, optimizer path, slot name)``,
    the optimizer an object of the tree), which the optimizer's node references, as TF's
    optimizers record their slots for a restore to give back."""
    children: list[dict[str, int]] = [{}]
    leaves: dict[int, str] = {}

    def node_of(path: str) -> int:
        node = 0
        for name in _local_names(path):
            if name not in children[node]:
                children[node][name] = len(children)
                children.append({})
            node = children[node][name]
        return node

    for path in paths:
        node = node_of(path)
        if node in leaves or children[node]:
            raise ValueError(f"object path {path!r} is a variable and an object at once")
        leaves[node] = path
    owners = {owner: node_of(owner) for _, owner, _ in slots}
    # renumber breadth first from the root, as TF numbers the nodes it writes
    order, position = [0], {0: 0}
    for node in order:
        for child in children[node].values():
            position[child] = len(order)
            order.append(child)
    variable_nodes = {path: position[node] for node, path in leaves.items()}
    references: dict[int, bytes] = {}
    for k, (path, owner, slot) in enumerate(slots):
        if path not in variable_nodes:
            raise ValueError(f"slot {slot!r} of {path!r}: no such variable")
        references.setdefault(owners[owner], b"")
        references[owners[owner]] += pw.bytes_field(3, pw.varint_field(1, variable_nodes[path])
                                                    + pw.bytes_field(2, slot.encode())
                                                    + pw.varint_field(3, len(order) + k))
    graph = b""
    full_names = full_names or {}
    for node in order:
        body = b"".join(pw.bytes_field(1, pw.varint_field(1, position[child])
                                       + pw.bytes_field(2, name.encode()))
                        for name, child in children[node].items())
        if node in leaves:
            path = leaves[node]
            body += _attribute(full_names.get(path, path), checkpoint_key(path))
        graph += pw.bytes_field(1, body + references.get(node, b""))
    for path, owner, slot in slots:
        graph += pw.bytes_field(1, _attribute(f"{full_names.get(path, path)}/{slot}",
                                              slot_checkpoint_key(path, owner, slot)))
    return graph


def _string_tensor(value: bytes) -> tuple[bytes, int]:
    """(bytes, masked CRC32C) of a scalar string tensor as TF stores it: the length as a
    varint, the masked CRC32C of the length (as a little-endian uint32), the bytes; the CRC
    covers the length as a uint32, that checksum and the bytes."""
    length = struct.pack("<I", len(value))
    checksum = struct.pack("<I", masked_crc32c(length))
    return pw.varint(len(value)) + checksum + value, masked_crc32c(length + checksum + value)


def _entry(dtype: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    """A ``BundleEntryProto``: dtype, shape, shard 0, offset, size, masked CRC32C."""
    shape_proto = b"".join(pw.bytes_field(2, pw.varint_field(1, d)) for d in shape)
    return (pw.varint_field(1, dtype) + pw.bytes_field(2, shape_proto)
            + (pw.varint_field(4, offset) if offset else b"")
            + (pw.varint_field(5, size) if size else b"") + pw.fixed32_field(6, crc))


def write_tf_checkpoint(prefix: str | os.PathLike, variables: Mapping[str, np.ndarray], *,
                        full_names: Mapping[str, str] | None = None,
                        slots: Mapping[tuple[str, str, str], np.ndarray] | None = None) -> str:
    """Write ``variables`` (object path -> array: float32, int64, ...) as the TF2 checkpoint
    ``prefix`` (``prefix.index`` and ``prefix.data-00000-of-00001``; the folder is made), with
    their object graph (:func:`object_graph`), and the optimizer slots ``slots``
    (``(variable path, optimizer path, slot name)`` -> array, the variable's shape) that TF's
    optimizer takes back when it makes its slots after a restore. Returns the prefix.

    Raises:
      ValueError: an array of a dtype TF checkpoints do not hold, a path that is a variable
        and an object at once, a slot of no variable written."""
    prefix = os.fspath(prefix)
    slots = dict(slots or {})
    tensors: dict[str, tuple[int, tuple[int, ...], bytes, int]] = {}
    keyed = [(checkpoint_key(path), path, value) for path, value in variables.items()]
    keyed += [(slot_checkpoint_key(*where), "/".join(where), value)
              for where, value in slots.items()]
    for key, path, value in keyed:
        array = np.asarray(value)  # (not ascontiguousarray: it makes a scalar 1-d)
        if array.dtype not in TF_DTYPE:
            raise ValueError(f"{path}: dtype {array.dtype} has no TF checkpoint dtype")
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        tensors[key] = (TF_DTYPE[array.dtype], array.shape, raw, masked_crc32c(raw))
    raw, crc = _string_tensor(object_graph(list(variables), full_names, list(slots)))
    tensors[OBJECT_GRAPH_KEY] = (DT_STRING, (), raw, crc)
    data, records = bytearray(), []
    for key in sorted(tensors):
        dtype, shape, raw, crc = tensors[key]
        records.append((key.encode(), _entry(dtype, shape, len(data), len(raw), crc)))
        data += raw
    header = pw.varint_field(1, 1) + pw.bytes_field(3, pw.varint_field(1, 1))
    table = write_table([(b"", header), *records])
    files.makedirs(files.parent(prefix) or ".")
    files.write_bytes(f"{prefix}.data-00000-of-00001", bytes(data))
    files.write_bytes(f"{prefix}.index", table)  # last: a reader finds a whole checkpoint
    return prefix


def write_checkpoint_state(folder: str | os.PathLike, name: str) -> None:
    """The ``checkpoint`` state file TF's ``CheckpointManager`` keeps beside its checkpoints,
    naming ``name`` (``ckpt-1``) the latest (what ``tf.train.latest_checkpoint`` reads)."""
    files.write_text(files.join(os.fspath(folder), "checkpoint"),
                     f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')


__all__ = ["checkpoint_key", "object_graph", "slot_checkpoint_key", "write_checkpoint_state",
           "write_tf_checkpoint"]
