"""Samples made in worker processes, handed to the main process a chunk at a time.

Handing a sample over costs the main process per element and per array (open, map, fault in,
unlink a shared-memory block). One sample per element makes the main process the bottleneck
at a few hundred images per second however many workers run. Here each element is a
*chunk*: a worker maps ``size`` consecutive positions and stacks the samples' arrays, so the
main process maps one file per chunk; the chunk is then split back into samples that are
views of those arrays (no copy), and a batch that is exactly one whole chunk is passed on as
the chunk's own arrays (no copy either; see ``whole_chunk``).

Order is kept: chunk c holds positions ``first + (c*size ... c*size + size-1) * step``, worker
``c mod workers`` makes chunk c and the main process reads the workers round-robin
(``data.worker_pool``), so the samples come out in position order, the same stream as one
process makes.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np

from jaxdet.data.geometry import Sample
from jaxdet.data.sample_pipeline import _SKIP
from jaxdet.data.worker_pool import ChunkPool

_ROWS = "_chunk_rows"  # (the chunk's arrays, this sample's row, the chunk's row count)


@dataclasses.dataclass(frozen=True)
class _ChunkMap:
    """Chunk index -> the packed samples of its positions (runs in a worker process)."""

    sample_map: Callable[[int], Sample]
    first: int
    stop: int
    step: int
    size: int

    def __call__(self, chunk: int) -> dict[str, Any]:
        begin = self.first + chunk * self.size * self.step
        end = min(self.stop, begin + self.size * self.step)
        return pack([self.sample_map(p) for p in range(begin, end, self.step)])


def pack(samples: Sequence[Sample]) -> dict[str, Any]:
    """Samples -> ``{"arrays": {key: [n_readable, ...]}, "rest": [one dict per sample]}``:
    the readable samples' ndarray fields stacked, every other field (and a skipped sample
    whole) in ``rest``, in the samples' order."""
    readable = [s for s in samples if _SKIP not in s]
    keys = [k for k, v in readable[0].items() if isinstance(v, np.ndarray)] if readable else []
    arrays = {k: np.stack([s[k] for s in readable]) for k in keys}
    rest = [s if _SKIP in s else {k: v for k, v in s.items() if k not in arrays}
            for s in samples]
    return {"arrays": arrays, "rest": rest}


class _Unpack(grain.experimental.FlatMapTransform):
    """A packed chunk -> its samples, each array a view of the chunk's (main process)."""

    def __init__(self, size: int):
        self.max_fan_out = size

    def flat_map(self, chunk: dict[str, Any]) -> list[Sample]:
        arrays = chunk["arrays"]
        count = len(next(iter(arrays.values()))) if arrays else 0
        out, row = [], 0
        for rest in chunk["rest"]:
            if _SKIP in rest:
                out.append(rest)
                continue
            sample = dict(rest)
            sample.update((k, a[row]) for k, a in arrays.items())
            sample[_ROWS] = (arrays, row, count)
            out.append(sample)
            row += 1
        return out


def whole_chunk(samples: Sequence[Sample]) -> dict[str, np.ndarray] | None:
    """The chunk's stacked arrays when ``samples`` are all its rows in order, else None (the
    caller stacks)."""
    tag = samples[0].get(_ROWS)
    if tag is None or tag[2] != len(samples):
        return None
    arrays = tag[0]
    for row, sample in enumerate(samples):
        mine = sample.get(_ROWS)
        if mine is None or mine[0] is not arrays or mine[1] != row:
            return None
    return arrays


def ordered_samples(sample_map: Callable[[int], Sample], *, first: int = 0,
                    stop: int = sys.maxsize, step: int = 1, worker_count: int,
                    threads: int, prefetch: int, chunk_size: int) -> grain.IterDataset:
    """``sample_map(p)`` for p in ``range(first, stop, step)``, in that order.

    ``worker_count`` 0: mapped by ``threads`` threads of this process (``prefetch`` samples
    ahead). Else by that many worker processes, ``chunk_size`` positions per element, one
    thread each, one chunk queued per worker beside the one it is making."""
    if worker_count == 0:
        ds = grain.MapDataset.range(first, stop, step).map(sample_map)
        return ds.to_iter_dataset(grain.ReadOptions(num_threads=threads,
                                                    prefetch_buffer_size=prefetch))
    positions = len(range(first, stop, step))
    chunks = -(-positions // chunk_size)
    pool = _PooledChunks(_ChunkMap(sample_map, first, stop, step, chunk_size), chunks,
                         worker_count)
    return grain.experimental.FlatMapIterDataset(pool, _Unpack(chunk_size))


class _PooledChunks(grain.IterDataset):
    """The chunks made by a ``worker_pool.ChunkPool``, as the root of a grain pipeline; each
    iteration starts its own workers."""

    def __init__(self, chunk_map: _ChunkMap, chunks: int, workers: int):
        super().__init__()
        self._chunk_map, self._chunks, self._workers = chunk_map, chunks, workers

    def __iter__(self) -> grain.DatasetIterator:
        return _PoolIterator(ChunkPool(self._chunk_map, chunks=self._chunks,
                                       workers=self._workers))

    def __str__(self) -> str:
        return f"PooledChunks(workers={self._workers})"


class _PoolIterator(grain.DatasetIterator):
    def __init__(self, pool: ChunkPool):
        super().__init__()
        self._pool = pool

    def __next__(self) -> dict[str, Any]:
        return next(self._pool)

    def get_state(self) -> dict[str, Any]:
        return {"next_chunk": self._pool.next_chunk}

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError("the loader resumes from its own position (its stream "
                                  "index), with a new pool")

    def close(self) -> None:
        self._pool.close()
        super().close()


__all__ = ["ordered_samples", "pack", "whole_chunk"]
