"""The loader's worker pool: chunks through shared memory in order, errors and deaths named,
back-pressure, nothing left behind, the main process's working directory."""

import errno
import os
import signal
import sys
import time

import ml_dtypes
import numpy as np
import pytest

from jaxdet.data import worker_pool
from jaxdet.data.worker_pool import ChunkPool, WorkerError, read_shared, write_shared

# every test here starts worker processes: the slow tier
pytestmark = pytest.mark.slow


def _gone(pid: int, deadline_s: float = 10.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _ours(tag_pid: int) -> list[str]:
    return [p.name for p in worker_pool._shared_dir().glob(f"jaxdet-chunk-{tag_pid}-*")]


def test_shared_arrays_round_trip_and_outlive_their_file(tmp_path):
    arrays = {"image": np.arange(2 * 5 * 7 * 3, dtype=np.uint8).reshape(2, 5, 7, 3),
              "boxes": np.linspace(0, 1, 2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4),
              "half": np.array([[1.5, -2.25, 3.0]], dtype=ml_dtypes.bfloat16),
              "none": np.zeros((2, 0), np.int32)}
    meta = write_shared(arrays, tmp_path / "chunk")
    assert meta["size"] % 64 == 0 and meta["size"] >= sum(a.nbytes for a in arrays.values())
    back = read_shared(meta)
    assert not (tmp_path / "chunk").exists()  # unlinked once mapped
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)
    back["image"][0, 0, 0] = 200  # writable, and nobody else maps it any more
    assert back["image"][0, 0, 0, 0] == 200


def test_no_arrays_writes_no_file(tmp_path):
    meta = write_shared({"none": np.zeros((0, 3), np.float32)}, tmp_path / "chunk")
    assert meta["path"] is None and not list(tmp_path.iterdir())
    assert read_shared(meta)["none"].shape == (0, 3)


def test_full_shared_memory_is_named_with_a_remedy(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match=r"no room for a 1\.0 MiB chunk of samples in .*No space "
                                      r"left on device.*--shm-size") as info:
        write_shared({"image": np.zeros((1024, 1024), np.uint8)}, tmp_path / "chunk")
    assert info.value.errno is None  # not read as a full disk: nothing of the run is at risk
    assert not list(tmp_path.iterdir())


def test_chunks_come_in_order_from_a_closure_and_nothing_is_left():
    offset = 1000

    def chunk_map(c):  # a closure: pickled by value for the workers
        return {"arrays": {"x": np.full((3, 2), offset + c, np.int64)},
                "rest": [{"pid": os.getpid()}] * 3}

    pool = ChunkPool(chunk_map, chunks=7, workers=3)
    chunks = list(pool)
    assert [int(c["arrays"]["x"][0, 0]) for c in chunks] == [offset + c for c in range(7)]
    pids = [c["rest"][0]["pid"] for c in chunks]
    assert len(set(pids)) == 3 and pids[:3] == pids[3:6] and os.getpid() not in pids
    pool.close()
    assert all(_gone(pid) for pid in set(pids))
    assert _ours(os.getpid()) == []


def test_a_worker_exception_is_raised_here_with_its_traceback():
    def chunk_map(c):
        if c == 1:
            raise ValueError("record 17 has a box with x_max < x_min")
        return {"arrays": {"x": np.zeros(2)}, "rest": [{}, {}]}

    pool = ChunkPool(chunk_map, chunks=4, workers=2)
    next(pool)
    with pytest.raises(ValueError, match="x_max < x_min") as info:
        next(pool)
    note = "\n".join(info.value.__notes__)
    assert "in loader worker 1, making chunk 1" in note and "chunk_map" in note
    with pytest.raises(StopIteration):  # closed
        next(pool)


def test_a_killed_worker_is_named_with_its_signal():
    def chunk_map(c):
        if c == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"arrays": {"x": np.zeros(2)}, "rest": [{}, {}]}

    pool = ChunkPool(chunk_map, chunks=6, workers=2)
    next(pool), next(pool)
    with pytest.raises(WorkerError, match=r"loader worker 0 exited with code -9 \(killed by "
                                          r"signal 9\) before sending chunk 2"):
        next(pool)


def test_workers_stay_two_chunks_ahead_and_stop_when_closed(tmp_path):
    def chunk_map(c):
        (tmp_path / f"made-{c}").touch()
        return {"arrays": {"x": np.full(4, c)}, "rest": [{"pid": os.getpid()}]}

    pool = ChunkPool(chunk_map, chunks=sys.maxsize, workers=2)
    first = next(pool)
    deadline = time.monotonic() + 20
    while len(list(tmp_path.iterdir())) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    made = sorted(int(p.name.split("-")[1]) for p in tmp_path.iterdir())
    # worker 0 (even chunks): the one taken + 2 ahead; worker 1 (odd): 2 ahead
    assert made == [0, 1, 2, 3, 4], made
    assert int(first["arrays"]["x"][0]) == 0
    pids = {next(pool)["rest"][0]["pid"] for _ in range(3)}
    pool.close()
    assert all(_gone(pid) for pid in pids)
    assert _ours(os.getpid()) == []  # the chunks made and never taken are removed


def test_workers_read_relative_paths_from_the_main_process_directory(tmp_path, monkeypatch):
    warm = ChunkPool(lambda c: {"arrays": {}, "rest": [{}]}, chunks=1, workers=1)
    list(warm)  # the fork server is running, started from the old directory
    warm.close()
    (tmp_path / "label.txt").write_text("duck")
    monkeypatch.chdir(tmp_path)

    def chunk_map(c):
        with open("label.txt") as f:
            return {"arrays": {}, "rest": [{"label": f.read()}]}

    assert [c["rest"][0]["label"] for c in ChunkPool(chunk_map, chunks=2, workers=2)] == \
        ["duck", "duck"]
