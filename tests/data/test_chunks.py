"""Samples handed from worker processes in chunks: packing, order, zero-copy batches, and the
worker count ``auto`` picks."""

import numpy as np
import pytest

from jaxdet.data.chunks import _ROWS, _Unpack, ordered_samples, pack, whole_chunk
from jaxdet.data.loader import MAX_AUTO_WORKERS, _collate, resolve_worker_count
from jaxdet.data.sample_pipeline import _SKIP


def _sample(position: int) -> dict:
    """A padded sample whose every field encodes ``position`` (position 7: unreadable)."""
    if position == 7:
        return {_SKIP: "truncated file", "path": "seven.jpg", "index": 7, "record": {}}
    return {
        "image": np.full((4, 5, 3), position, np.uint8),
        "boxes": np.full((2, 4), position / 100, np.float32),
        "classes": np.full((2,), position, np.int32),
        "valid": np.array([True, position % 2 == 0]),
        "ignore": np.zeros((2,), bool),
        "image_id": np.int64(1000 + position),
        "image_info": np.array([4, 5, 4, 5], np.float32),
        "mask": np.bool_(True),
        "num_truncated": position % 3,
        "_stream_index": position,
    }


def test_pack_then_unpack_gives_the_samples_back_as_views():
    samples = [_sample(p) for p in (5, 6, 7, 8)]
    chunk = pack(samples)
    assert chunk["arrays"]["image"].shape == (3, 4, 5, 3)  # the 3 readable ones, stacked
    back = _Unpack(4).flat_map(chunk)
    assert [s.get(_SKIP) for s in back] == [None, None, "truncated file", None]
    assert back[2]["path"] == "seven.jpg"
    for got, want in zip(back, samples, strict=True):
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)
    image = back[3]["image"]
    assert np.shares_memory(image, chunk["arrays"]["image"]) and image[0, 0, 0] == 8


def test_a_batch_that_is_one_whole_chunk_is_not_copied():
    chunk = pack([_sample(p) for p in (1, 2, 3)])
    samples = _Unpack(3).flat_map(chunk)
    assert whole_chunk(samples) is chunk["arrays"]
    batch = _collate(samples)
    assert batch["images"] is chunk["arrays"]["image"]
    assert batch["image_id"].tolist() == [1001, 1002, 1003]
    assert batch["_num_truncated"] == 1 + 2 + 0
    # part of a chunk, rows out of order, or samples without a chunk: stacked as before
    assert whole_chunk(samples[:2]) is None
    assert whole_chunk([samples[1], samples[0], samples[2]]) is None
    plain = _collate([_sample(p) for p in (1, 2, 3)])
    assert whole_chunk([_sample(1)]) is None and _ROWS not in _sample(1)
    for key in ("images", "boxes", "classes", "valid", "image_info"):
        np.testing.assert_array_equal(batch[key], plain[key], err_msg=key)


@pytest.mark.slow
def test_worker_processes_keep_the_position_order():
    """range(3, 40, 3) in chunks of 4 (the last one short) over 2 processes: the same
    samples, in the same order, as mapping the positions in this process."""
    def sample_map(position):  # a closure: grain pickles it by value for the workers
        return _sample(position) if position != 7 else _sample(7)

    def positions(ds):
        return [int(s["_stream_index"]) if _SKIP not in s else -1 for s in ds]

    serial = ordered_samples(sample_map, first=3, stop=40, step=3, worker_count=0, threads=2,
                             prefetch=4, chunk_size=4)
    parallel = ordered_samples(sample_map, first=3, stop=40, step=3, worker_count=2,
                               threads=2, prefetch=4, chunk_size=4)
    want = list(range(3, 40, 3))
    assert positions(serial) == want
    got = list(parallel)
    assert positions(got) == want
    np.testing.assert_array_equal(got[-1]["image"], _sample(39)["image"])


@pytest.mark.parametrize(("cores", "expected"), [(1, 0), (2, 0), (4, 0), (5, 3), (16, 14),
                                                 (64, MAX_AUTO_WORKERS)])
def test_auto_worker_count_for_training(cores, expected):
    assert resolve_worker_count("auto", cores=cores) == expected


def test_auto_uses_threads_for_evaluation_and_cpu_steps_and_keeps_numbers():
    assert resolve_worker_count("auto", training=False, cores=64) == 0
    assert resolve_worker_count("auto", accelerator=False, cores=64) == 0
    assert resolve_worker_count(3, cores=2) == 3
    assert resolve_worker_count(0, cores=64) == 0
