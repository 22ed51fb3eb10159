"""Loaders: batch layout, determinism, resume, worker-count independence, eval padding."""

import json
import logging
import shutil

import numpy as np
import pytest

from jaxdet.data.augment import Normalize, RandomHorizontalFlip, SSDRandomCrop
from jaxdet.data.coco import CocoSource
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.loader import BATCH_KEYS, make_train_loader
from jaxdet.data.records import make_record
from jaxdet.data.resize import FixedShapeResizer, KeepAspectRatioResizer, keep_aspect_ratio_size

TRAIN_OPS = [RandomHorizontalFlip(), SSDRandomCrop(), FixedShapeResizer(32, 32), Normalize()]


@pytest.fixture
def source(shapes_dir):
    return CocoSource(shapes_dir / "annotations.json", shapes_dir / "images")


def _take(it, n):
    return [next(it) for _ in range(n)]


def _assert_same(batches_a, batches_b):
    assert len(batches_a) == len(batches_b)
    for a, b in zip(batches_a, batches_b, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_train_batch_layout(source):
    it = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=0)
    batch = next(it)
    assert tuple(batch) == BATCH_KEYS
    expected = {
        "images": ((4, 32, 32, 3), np.float32), "boxes": ((4, 5, 4), np.float32),
        "classes": ((4, 5), np.int32), "valid": ((4, 5), np.bool_),
        "ignore": ((4, 5), np.bool_), "image_id": ((4,), np.int64),
        "image_info": ((4, 4), np.float32), "mask": ((4,), np.bool_),
    }
    for key, (shape, dtype) in expected.items():
        assert batch[key].shape == shape and batch[key].dtype == dtype, key
    assert batch["mask"].all()
    assert np.all(batch["image_info"][:, 2:] == 32)
    assert set(batch["image_id"]) <= set(source.image_ids)
    assert np.all(batch["boxes"][~batch["valid"]] == 0)


def test_train_is_deterministic_and_seeded(source):
    a = _take(make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=1), 4)
    b = _take(make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=1), 4)
    c = _take(make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=2), 4)
    _assert_same(a, b)
    assert not all(np.array_equal(x["images"], y["images"]) for x, y in zip(a, c, strict=True))


def test_epochs_are_reshuffled_permutations(source):
    it = make_train_loader(source, [FixedShapeResizer(16, 16)], batch_size=4, max_boxes=5,
                           seed=0)
    ids = np.concatenate([b["image_id"] for b in _take(it, 6)])  # 2 epochs of 12
    first, second = ids[:12], ids[12:]
    assert sorted(first) == sorted(second) == sorted(source.image_ids)
    assert list(first) != list(second)
    plain = make_train_loader(source, [FixedShapeResizer(16, 16)], batch_size=4, max_boxes=5,
                              seed=0, shuffle=False)
    ids = np.concatenate([b["image_id"] for b in _take(plain, 6)])
    assert list(ids) == source.image_ids * 2


def test_resume_from_state(source):
    it = make_train_loader(source, TRAIN_OPS, batch_size=5, max_boxes=5, seed=3)
    _take(it, 3)
    state = json.loads(json.dumps(it.get_state()))  # JSON round trip
    expected = _take(it, 2)
    resumed = make_train_loader(source, TRAIN_OPS, batch_size=5, max_boxes=5, seed=3)
    resumed.set_state(state)
    _assert_same(_take(resumed, 2), expected)
    # a running iterator can be rewound too
    it.set_state(state)
    _assert_same(_take(it, 2), expected)


def test_state_mismatch_is_refused(source):
    state = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=3).get_state()
    other = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=4)
    with pytest.raises(ValueError, match="seed"):
        other.set_state(state)


def _serial_and_two_workers(source, ops, batches: int, **kwargs):
    """(the in-process loader, its batches; the 2-process loader, its batches) after
    ``batches`` batches each; both loaders' states are checked equal."""
    serial = make_train_loader(source, ops, worker_count=0, **kwargs)
    expected = _take(serial, batches)
    parallel = make_train_loader(source, ops, worker_count=2, **kwargs)
    try:
        got = _take(parallel, batches)
        state = parallel.get_state()
    finally:
        parallel.close()
    _assert_same(got, expected)
    assert state == serial.get_state()
    return serial, parallel, got


@pytest.mark.slow
def test_two_workers_give_the_same_batches(source):
    _serial_and_two_workers(source, TRAIN_OPS, 3, batch_size=4, max_boxes=5, seed=7)


@pytest.fixture
def corrupt_source(shapes_dir, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(shapes_dir / "images", images)
    data = json.loads((shapes_dir / "annotations.json").read_text())
    broken = data["images"][2]["file_name"]
    (images / broken).write_bytes(b"\xff\xd8\xff\xe0 truncated")
    return CocoSource(shapes_dir / "annotations.json", images), broken, data["images"][2]["id"]


@pytest.mark.slow
def test_worker_processes_skip_corrupt_images_as_threads_do(corrupt_source):
    """Chunks that hold a skipped sample (from then on chunks and batches are out of step)
    give the batches, skip count and resume position of the in-process loader."""
    source, _, broken_id = corrupt_source
    serial, parallel, got = _serial_and_two_workers(
        source, [FixedShapeResizer(16, 16)], 7, batch_size=3, max_boxes=5, seed=4)
    assert broken_id not in np.concatenate([b["image_id"] for b in got])
    assert parallel.skips["corrupt_image"] == serial.skips["corrupt_image"] == 1


def test_train_skips_corrupt_images(corrupt_source, caplog):
    source, broken, broken_id = corrupt_source
    it = make_train_loader(source, [FixedShapeResizer(16, 16)], batch_size=4, max_boxes=5,
                           seed=0, shuffle=False)
    with caplog.at_level(logging.WARNING, logger="jaxdet.data"):
        ids = np.concatenate([b["image_id"] for b in _take(it, 6)])  # 2 epochs + 2 images
    assert broken_id not in ids and len(ids) == 24
    assert it.skips["corrupt_image"] == 2  # counted every epoch, logged once
    assert sum(broken in r.getMessage() for r in caplog.records) == 1


def test_all_images_corrupt_raises(tmp_path):
    class Broken:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return make_record(str(tmp_path / f"missing{i}.jpg"), i, 8, 8)

    it = make_train_loader(Broken(), [], batch_size=2, max_boxes=2, seed=0)
    with pytest.raises(RuntimeError, match="could not be read"):
        next(it)


def test_empty_source_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"images": [], "annotations": [], "categories": []}))
    source = CocoSource(path, tmp_path)
    with pytest.raises(ValueError, match="empty.json has no images"):
        make_train_loader(source, [], batch_size=2, max_boxes=2, seed=0)
    with pytest.raises(ValueError, match="has no images"):
        make_eval_loader(source, [], batch_size=2, max_boxes=2)


def test_mixed_shapes_without_resizer_name_the_fix(source):
    it = make_train_loader(source, [], batch_size=4, max_boxes=5, seed=0)
    with pytest.raises(Exception, match="resizer"):
        _take(it, 3)


def test_eval_pads_last_batch_and_keeps_order(source):
    ops = [KeepAspectRatioResizer(24, 32), Normalize()]
    loader = make_eval_loader(source, ops, batch_size=5, max_boxes=6)
    assert len(loader) == 3 and loader.num_examples == 12
    batches = list(loader)
    assert len(batches) == 3
    assert all(tuple(b) == BATCH_KEYS for b in batches)
    mask = np.concatenate([b["mask"] for b in batches])
    np.testing.assert_array_equal(mask, [True] * 12 + [False] * 3)
    ids = np.concatenate([b["image_id"] for b in batches])
    assert list(ids[:12]) == source.image_ids
    last = batches[-1]
    assert not last["valid"][2:].any() and last["images"].shape == (5, 32, 32, 3)
    # image_info: original size and content extent inside the 32x32 canvas
    r = source[0]
    info = batches[0]["image_info"][0]
    assert tuple(info[:2]) == (r["height"], r["width"])
    assert tuple(info[2:]) == keep_aspect_ratio_size(r["height"], r["width"], 24, 32)
    # eval is deterministic
    _assert_same(batches, list(loader))


@pytest.mark.slow
def test_eval_with_workers_matches_serial(source):
    ops = [FixedShapeResizer(24, 24)]
    serial = list(make_eval_loader(source, ops, batch_size=5, max_boxes=6))
    parallel = list(make_eval_loader(source, ops, batch_size=5, max_boxes=6, worker_count=2))
    _assert_same(serial, parallel)


def test_eval_masks_corrupt_images(corrupt_source):
    source, broken, broken_id = corrupt_source
    loader = make_eval_loader(source, [FixedShapeResizer(16, 16)], batch_size=4, max_boxes=5)
    batches = list(loader)
    mask = np.concatenate([b["mask"] for b in batches])
    assert mask.tolist() == [True, True, False] + [True] * 9
    assert loader.skips["corrupt_image"] == 1


def test_sharded_eval_covers_every_image_once(source):
    ops = [FixedShapeResizer(16, 16)]
    seen = []
    for shard in range(2):
        loader = make_eval_loader(source, ops, batch_size=4, max_boxes=5, shard_index=shard,
                                  shard_count=2)
        assert len(loader) == 2  # 12 images, 2 shards x 4 per batch -> 16 slots
        for batch in loader:
            seen += list(batch["image_id"][batch["mask"]])
    assert sorted(seen) == sorted(source.image_ids)


def test_first_batch_is_checked_against_the_task_layout(source):
    """The train step reads the task's batch layout; a loader whose batches do not fit it (here
    5 boxes per image where the task pads to 8) stops at the first batch naming the field."""
    from jaxdet.data.batch_layout import BatchField

    layout = {"images": BatchField((32, 32, 3), np.float32, spatial_axis=0),
              "boxes": BatchField((8, 4), np.float32)}
    it = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=8, seed=0, layout=layout)
    assert next(it)["boxes"].shape == (4, 8, 4)
    it = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=5, seed=0, layout=layout)
    with pytest.raises(ValueError, match=r"batch field 'boxes' is float32\[5, 4\] per example; "
                                         r"the task expects float32\[8, 4\]"):
        next(it)
    missing = {**layout, "keypoints": BatchField((8, 17, 3), np.float32)}
    it = make_train_loader(source, TRAIN_OPS, batch_size=4, max_boxes=8, seed=0, layout=missing)
    with pytest.raises(ValueError, match="the batch has no 'keypoints'"):
        next(it)
