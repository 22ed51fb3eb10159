"""TF2 checkpoints (tensor bundles) read without TensorFlow.

A checkpoint ``PREFIX`` (e.g. ``checkpoint/ckpt-0`` of a model-zoo download) is
``PREFIX.index``, a sorted table (``interop.sstable``) whose key ``""`` holds the bundle header
(shard count, endianness) and whose other keys name tensors, each with a ``BundleEntryProto``
(dtype, shape, shard, offset, size, masked CRC32C), plus the shards
``PREFIX.data-00000-of-0000N`` that hold the tensors' bytes. TF2's object-based checkpoints
name a variable by its object path, e.g.
``model/_feature_extractor/mobilenet_v2/Conv1/kernel/.ATTRIBUTES/VARIABLE_VALUE``, and store the
object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``, a ``TrackableObjectGraph``) that lists every
path reaching each tensor.

    ckpt = TfCheckpoint("checkpoint/ckpt-0")       # or the folder, or the .index file
    ckpt.keys(); ckpt.shape(key); ckpt.dtype(key)
    kernel = ckpt.read(key)                        # numpy array, CRC-checked
    ckpt.variables()                               # {object path: checkpoint key}

Every failure is a :class:`CheckpointError` naming the file and the tensor or block.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from jaxdet import files
from jaxdet.interop import protowire as pw
from jaxdet.interop.sstable import TableError, masked_crc32c, read_table

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
MAX_PATHS_PER_OBJECT = 8

# tensorflow/core/framework/types.proto DataType -> numpy
DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32),
    4: np.dtype(np.uint8), 5: np.dtype(np.int16), 6: np.dtype(np.int8),
    7: np.dtype(object),  # DT_STRING
    8: np.dtype(np.complex64), 9: np.dtype(np.int64), 10: np.dtype(np.bool_),
    14: np.dtype(ml_dtypes.bfloat16), 17: np.dtype(np.uint16), 18: np.dtype(np.complex128),
    19: np.dtype(np.float16), 22: np.dtype(np.uint32), 23: np.dtype(np.uint64),
}
DT_STRING = 7


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names the file and the record."""


@dataclass(frozen=True)
class TensorEntry:
    """Where a tensor lives: ``dtype`` is the TF DataType number, ``crc32c`` masked."""

    key: str
    dtype: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int


def resolve_prefix(path: str | os.PathLike) -> str:
    """The checkpoint prefix of ``path`` (a local path or a URL such as ``gs://...``): a
    prefix (``ckpt-0``), its ``.index`` or a data shard, or a folder (its ``checkpoint``
    state file's ``model_checkpoint_path``, else the one ``*.index`` in it). Raises
    FileNotFoundError / CheckpointError naming what was looked for."""
    text = os.fspath(path).rstrip("/") or "/"
    if files.isdir(text):
        state = files.join(text, "checkpoint")
        if files.isfile(state):
            match = re.search(r'^model_checkpoint_path:\s*"(.*)"', files.read_text(state), re.M)
            if match:
                prefix = match.group(1)
                absolute = files.is_url(prefix) or os.path.isabs(prefix)
                return prefix if absolute else files.join(text, prefix)
        indexes = files.glob(files.join(text, "*.index"), files_only=True)
        if len(indexes) == 1:
            return indexes[0][:-len(".index")]
        raise CheckpointError(
            f"{text}: a folder with {len(indexes)} *.index files and no 'checkpoint' state "
            "file; pass the checkpoint prefix, e.g. checkpoint/ckpt-0")
    if text.endswith(".index"):
        return text[:-len(".index")]
    match = re.match(r"^(.*)\.data-\d{5}-of-\d{5}$", text)
    if match:
        return match.group(1)
    if not files.isfile(text + ".index"):
        raise FileNotFoundError(f"TF checkpoint not found: {text}.index does not exist")
    return text


def _shape(proto: bytes) -> tuple[int, ...]:
    msg = pw.parse(proto)
    if pw.first_int(msg, 3):
        raise CheckpointError("a tensor of unknown rank cannot be restored")
    return tuple(pw.signed64(pw.first_int(dim, 1)) for dim in pw.submessages(msg, 2))


def _entry(key: str, value: bytes) -> TensorEntry:
    msg = pw.parse(value)
    if msg.get(7):
        raise CheckpointError(f"tensor {key!r} is stored in slices (a partitioned variable), "
                              "which jaxdet does not read")
    return TensorEntry(key, pw.first_int(msg, 1), _shape(pw.first_bytes(msg, 2)),
                       pw.first_int(msg, 3), pw.signed64(pw.first_int(msg, 4)),
                       pw.signed64(pw.first_int(msg, 5)), pw.first_int(msg, 6))


class _RemoteShard:
    """A data shard in a remote store, read by byte ranges: ``shard[a:b]`` fetches bytes
    ``[a, b)``; ``shape[0]`` is its size (as a memory-mapped local shard's)."""

    def __init__(self, path: str, size: int):
        self.path, self.shape = path, (size,)

    def __getitem__(self, span: slice) -> bytes:
        return files.read_range(self.path, span.start, span.stop - span.start)


class TfCheckpoint:
    """A TF (v2 bundle) checkpoint; see the module docstring."""

    def __init__(self, path: str | os.PathLike):
        self.prefix = resolve_prefix(path)
        self.index_path = f"{self.prefix}.index"
        if not files.isfile(self.index_path):
            raise FileNotFoundError(f"TF checkpoint index not found: {self.index_path}")
        try:
            records = read_table(files.read_bytes(self.index_path), self.index_path)
        except TableError as e:
            raise CheckpointError(str(e)) from None
        header = dict(records[:1]).get(b"")
        if header is None:
            raise CheckpointError(f"{self.index_path}: no bundle header (key ''): not a "
                                  "TensorFlow checkpoint index")
        try:
            msg = pw.parse(header)
            self.num_shards = pw.first_int(msg, 1, 1)
            self.big_endian = pw.first_int(msg, 2) == 1
            self.entries: dict[str, TensorEntry] = {}
            for key, value in records[1:]:
                name = key.decode("utf-8", "replace")
                self.entries[name] = _entry(name, value)
        except pw.WireError as e:
            raise CheckpointError(f"{self.index_path}: malformed record ({e})") from None
        except CheckpointError as e:
            raise CheckpointError(f"{self.index_path}: {e}") from None
        self._shards: dict[int, np.memmap | bytes] = {}

    # ------------------------------------------------------------------ listing

    def keys(self) -> list[str]:
        return list(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._get(key).shape

    def dtype(self, key: str) -> np.dtype:
        entry = self._get(key)
        if entry.dtype not in DTYPES:
            raise CheckpointError(f"{self.index_path}: tensor {key!r} has TF dtype "
                                  f"{entry.dtype}, which jaxdet does not read")
        return DTYPES[entry.dtype]

    def _get(self, key: str) -> TensorEntry:
        try:
            return self.entries[key]
        except KeyError:
            raise KeyError(f"{self.index_path}: no tensor {key!r}") from None

    # ------------------------------------------------------------------ data

    def shard_path(self, shard: int) -> str:
        return f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}"

    def _shard(self, shard: int):
        """A local shard memory-mapped; a remote one opened for range reads (only the
        tensors read are fetched)."""
        if shard not in self._shards:
            path = self.shard_path(shard)
            if not files.isfile(path):
                raise CheckpointError(f"{self.index_path}: data shard "
                                      f"{files.basename(path)} is missing")
            size = files.getsize(path)
            if files.is_url(path):
                self._shards[shard] = _RemoteShard(path, size)
            else:
                self._shards[shard] = (np.memmap(path, np.uint8, mode="r") if size
                                       else np.zeros((0,), np.uint8))
        return self._shards[shard]

    def raw_bytes(self, key: str) -> bytes:
        """The tensor's stored bytes, CRC-checked."""
        entry = self._get(key)
        data = self._shard(entry.shard)
        path = self.shard_path(entry.shard)
        end = entry.offset + entry.size
        if entry.offset < 0 or end > data.shape[0]:
            raise CheckpointError(
                f"{path}: tensor {key!r} needs bytes [{entry.offset}, {end}) but the file has "
                f"{data.shape[0]}: the file is truncated")
        raw = bytes(data[entry.offset:end])
        if entry.dtype == DT_STRING:
            computed = masked_crc32c(self._string_crc_bytes(key, raw, entry))
        else:
            computed = masked_crc32c(raw)
        if computed != entry.crc32c:
            raise CheckpointError(
                f"{path}: tensor {key!r} (bytes [{entry.offset}, {end})) fails its CRC32C check "
                f"(stored {entry.crc32c:#010x}, computed {computed:#010x}): the file is corrupt")
        return raw

    def read(self, key: str) -> np.ndarray:
        """The tensor as a numpy array (strings: an object array of ``bytes``)."""
        entry = self._get(key)
        dtype = self.dtype(key)
        raw = self.raw_bytes(key)
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.dtype == DT_STRING:
            return self._strings(key, raw, count).reshape(entry.shape)
        if len(raw) != count * dtype.itemsize:
            raise CheckpointError(
                f"{self.shard_path(entry.shard)}: tensor {key!r} of shape {entry.shape} and "
                f"dtype {dtype} should take {count * dtype.itemsize} bytes, the index says "
                f"{len(raw)}")
        array = np.frombuffer(raw, dtype.newbyteorder(">" if self.big_endian else "<"))
        return array.astype(dtype).reshape(entry.shape)

    def _string_crc_bytes(self, key: str, raw: bytes, entry: TensorEntry) -> bytes:
        """What TF's CRC of a string tensor covers: each length as a little-endian uint32
        (uint64 above 4 GiB) instead of its varint, then the rest as stored."""
        count = int(np.prod(entry.shape, dtype=np.int64))
        try:
            pos, parts = 0, []
            for _ in range(count):
                n, pos = pw.read_varint(raw, pos)
                parts.append(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little"))
        except pw.WireError as e:
            raise CheckpointError(f"{self.shard_path(entry.shard)}: string tensor {key!r}: {e}"
                                  ) from None
        return b"".join(parts) + raw[pos:]

    def _strings(self, key: str, raw: bytes, count: int) -> np.ndarray:
        """TF's string layout: ``count`` varint lengths, a 4-byte masked CRC32C of them, then
        the strings' bytes."""
        try:
            lengths, pos = [], 0
            for _ in range(count):
                n, pos = pw.read_varint(raw, pos)
                lengths.append(n)
        except pw.WireError as e:
            raise CheckpointError(f"{self.index_path}: string tensor {key!r}: {e}") from None
        pos += 4 if count else 0
        out = np.empty((count,), object)
        for i, n in enumerate(lengths):
            out[i] = raw[pos:pos + n]
            pos += n
        if pos != len(raw):
            raise CheckpointError(f"{self.index_path}: string tensor {key!r} holds {len(raw)} "
                                  f"bytes, its lengths add up to {pos}")
        return out

    # ------------------------------------------------------------------ object graph

    def object_graph(self) -> list[dict]:
        """The ``TrackableObjectGraph``: per node ``{"children": [(node_id, local_name)],
        "attributes": [(name, checkpoint_key)]}`` (node 0 is the root)."""
        if OBJECT_GRAPH_KEY not in self.entries:
            raise CheckpointError(f"{self.index_path}: no {OBJECT_GRAPH_KEY}: a TF1 name-based "
                                  "checkpoint, not an object-based TF2 one")
        graph = pw.parse(self.read(OBJECT_GRAPH_KEY).reshape(-1)[0])
        nodes = []
        for node in pw.submessages(graph, 1):
            children = [(pw.first_int(c, 1), pw.first_bytes(c, 2).decode())
                        for c in pw.submessages(node, 1)]
            attributes = [(pw.first_bytes(a, 1).decode(), pw.first_bytes(a, 3).decode())
                          for a in pw.submessages(node, 2)]
            nodes.append({"children": children, "attributes": attributes})
        return nodes

    def full_names(self) -> dict[str, str]:
        """``{checkpoint key: TF variable name}``: the name each variable had when saved (its
        ``var.name`` without ``:0``, e.g. ``conv1_bn/gamma`` or
        ``WeightSharedConvolutionalBoxPredictor/ClassPredictor/kernel``), as the object graph
        records it; tensors saved without one are left out."""
        out = {}
        if OBJECT_GRAPH_KEY not in self.entries:
            return out
        graph = pw.parse(self.read(OBJECT_GRAPH_KEY).reshape(-1)[0])
        for node in pw.submessages(graph, 1):
            for attribute in pw.submessages(node, 2):
                full_name = pw.first_bytes(attribute, 2).decode()
                if full_name:
                    out[pw.first_bytes(attribute, 3).decode()] = full_name
        return out

    def variables(self) -> dict[str, str]:
        """``{object path: checkpoint key}`` of every variable, each path by which the object
        graph reaches it (breadth first from the root; a variable shared by two objects, e.g. a
        head used by two predictors, is listed under both paths). A path joins local names
        with ``/``; a local name holding ``/`` itself (a dict key such as CenterNet's
        ``box/offset`` head) keeps it as ``.S``, as TF's keys do (:func:`local_name`)."""
        nodes = self.object_graph()
        out: dict[str, str] = {}
        paths_per_node: dict[int, int] = {}
        queue = deque([(0, "", (0,))])
        while queue:
            node_id, path, ancestors = queue.popleft()
            for name, key in nodes[node_id]["attributes"]:
                if name == "VARIABLE_VALUE" and key in self.entries:
                    out[path] = key
            for child, local in nodes[node_id]["children"]:
                # no cycles, and a bounded number of paths per object (shared sub-graphs)
                if child in ancestors or paths_per_node.get(child, 0) >= MAX_PATHS_PER_OBJECT:
                    continue
                paths_per_node[child] = paths_per_node.get(child, 0) + 1
                local = local_name(local)
                queue.append((child, f"{path}/{local}" if path else local, ancestors + (child,)))
        return out


def local_name(name: str) -> str:
    """A TF object's local name as one component of an object path: ``/`` inside it written
    ``.S`` (``box/offset`` -> ``box.Soffset``), so that the path's ``/`` separate objects."""
    return name.replace("/", ".S")


# where a TF2 training checkpoint keeps its global step: the TF OD API's model_main_tf2 saves
# tf.train.Checkpoint(step=..., model=..., optimizer=...); a Keras optimizer counts its own
STEP_PATHS = ("step", "optimizer/iter")


def training_step(checkpoint: TfCheckpoint) -> int | None:
    """The training step a TF2 checkpoint was saved at (its ``step`` variable, else its
    optimizer's iteration count), None when it holds neither (a zoo model exported for
    fine-tuning, a checkpoint of the model alone)."""
    variables = checkpoint.variables()
    for path in STEP_PATHS:
        key = variables.get(path)
        if key is not None:
            value = checkpoint.read(key)
            if value.size == 1 and np.issubdtype(value.dtype, np.integer):
                return int(value.reshape(-1)[0])
    return None


__all__ = ["DTYPES", "OBJECT_GRAPH_KEY", "STEP_PATHS", "VARIABLE_SUFFIX", "CheckpointError",
           "TensorEntry", "TfCheckpoint", "resolve_prefix", "training_step"]
