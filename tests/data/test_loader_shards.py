"""Training loader split over processes: each reads its rows of every global batch; together
they give the one-process batches exactly; per-process resume state."""

import json
import shutil

import numpy as np
import pytest

from jaxdet.data.augment import Normalize, RandomHorizontalFlip
from jaxdet.data.coco import CocoSource
from jaxdet.data.loader import SHARDED_STATE_FORMAT, STATE_FORMAT, make_train_loader
from jaxdet.data.resize import FixedShapeResizer

OPS = [RandomHorizontalFlip(), FixedShapeResizer(16, 16), Normalize()]


@pytest.fixture
def source(shapes_dir):
    return CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")


def _loaders(source, n, batch_size=4, **kw):
    return [make_train_loader(source, OPS, batch_size=batch_size, max_boxes=5, seed=7,
                              shard_index=p, shard_count=n, **kw) for p in range(n)]


@pytest.mark.parametrize("n", [2, 4])
def test_shards_concatenate_to_the_single_process_batches(source, n):
    # 12 images, global batch 4: 5 batches cross an epoch boundary (reshuffle) once
    single = make_train_loader(source, OPS, batch_size=4, max_boxes=5, seed=7)
    shards = _loaders(source, n)
    for _ in range(5):
        whole = next(single)
        parts = [next(s) for s in shards]
        assert all(len(p["image_id"]) == 4 // n for p in parts)
        for key in whole:
            np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key],
                                          err_msg=key)


def test_each_shard_reads_only_its_rows(source, monkeypatch):
    """Process 1 of 2 decodes stream samples 2, 3, 6, 7, ... and nothing else."""
    from jaxdet.data import loader

    seen = []
    original = loader._TrainMap.__call__
    monkeypatch.setattr(loader._TrainMap, "__call__",
                        lambda self, i: (seen.append(i), original(self, i))[1])
    it = _loaders(source, 2)[1]
    next(it), next(it)
    assert sorted(set(seen))[:4] == [2, 3, 6, 7]
    assert all((i % 4) in (2, 3) for i in seen)


def test_batch_must_split_evenly(source):
    with pytest.raises(ValueError, match="global batch size 4 does not split evenly over 3"):
        make_train_loader(source, OPS, batch_size=4, max_boxes=5, seed=0, shard_index=0,
                          shard_count=3)


def test_sharded_state_lists_every_process_and_each_resumes_its_own(source):
    def gather_from(loaders):
        return lambda _mine: [lo.get_state()["next_index"][p] for p, lo in enumerate(loaders)]

    shards = _loaders(source, 2)
    for s in shards:
        next(s), next(s), next(s)
    # stand-in for the cross-process all-gather: read each loader's own position
    gathering = make_train_loader(source, OPS, batch_size=4, max_boxes=5, seed=7, shard_index=0,
                                  shard_count=2, gather=gather_from(shards))
    state = json.loads(json.dumps(gathering.get_state()))
    assert state["format"] == SHARDED_STATE_FORMAT
    assert state["next_index"] == [12, 14] and state["batch_size"] == 4
    expected = [next(s) for s in shards]
    for p in range(2):
        resumed = _loaders(source, 2)[p]
        resumed.set_state(state)
        np.testing.assert_array_equal(next(resumed)["images"], expected[p]["images"])
    # without a gather a process knows only its own position
    assert shards[1].get_state()["next_index"] == [None, 18]  # after 4 batches
    with pytest.raises(ValueError, match="no position for process 0"):
        _loaders(source, 2)[0].set_state(shards[1].get_state())


def test_state_from_another_layout_is_refused(source):
    one = make_train_loader(source, OPS, batch_size=4, max_boxes=5, seed=7)
    assert one.get_state()["format"] == STATE_FORMAT  # unchanged one-process format
    two = _loaders(source, 2)[0]
    with pytest.raises(ValueError, match="shard_count=1 but this loader has shard_count=2"):
        two.set_state(one.get_state())
    with pytest.raises(ValueError, match="shard_count=2 but this loader has shard_count=1"):
        one.set_state(two.get_state())
    bigger = _loaders(source, 2, batch_size=8)[0]
    with pytest.raises(ValueError, match="batch_size=4 but this loader has batch_size=8"):
        bigger.set_state(two.get_state())
    old = {"format": STATE_FORMAT, "next_index": 8, "seed": 7, "shuffle": True,
           "num_records": 12, "shard_index": 0, "shard_count": 1}  # a pre-sharding checkpoint
    one.set_state(old)
    ref = make_train_loader(source, OPS, batch_size=4, max_boxes=5, seed=7)
    next(ref), next(ref)
    np.testing.assert_array_equal(next(one)["image_id"], next(ref)["image_id"])


def test_a_corrupt_image_shifts_only_its_process(source, shapes_dir, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(shapes_dir / "images", images)
    broken = CocoSource(shapes_dir / "annotations.json", images)
    plain = [make_train_loader(broken, OPS, batch_size=4, max_boxes=5, seed=7, shard_index=p,
                               shard_count=2, shuffle=False) for p in range(2)]
    first = [next(s)["image_id"] for s in plain]  # records 0-1 and 2-3
    (images / broken[1]["image_path"].split("/")[-1]).write_bytes(b"not a jpeg")
    shards = [make_train_loader(broken, OPS, batch_size=4, max_boxes=5, seed=7, shard_index=p,
                                shard_count=2, shuffle=False) for p in range(2)]
    got = [next(s)["image_id"] for s in shards]
    np.testing.assert_array_equal(got[1], first[1])  # process 1 unaffected
    # process 0 skips record 1 and takes its next row: record 4 (global batch 1, row 0)
    assert list(got[0]) == [first[0][0], broken[4]["image_id"]]
    assert shards[0].get_state()["next_index"] == [5, None]  # its next row: stream 5
    assert shards[0].skips.as_dict() == {"corrupt_image": 1}
