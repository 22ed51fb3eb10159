"""MetricsLogger: JSONL lines and TensorBoard event files; a disabled logger writes nothing."""

import json
import struct

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet.train.metrics_log import MetricsLogger


def _read_scalars(path):
    """(tag, step, value) from a TFRecord event file (length, crc, event proto, crc)."""
    from tensorboardX.proto import event_pb2

    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_jsonl_and_event_file(tmp_path):
    with MetricsLogger(tmp_path / "run") as logger:
        logger.log(1, {"loss": 2.5, "lr": np.float32(0.125)}, prefix="train")
        logger.log(2, {"loss": jnp.asarray(1.5), "grad_norm": float("nan")}, prefix="train/")
        logger.log(2, {"AP": 0.25})
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2, 2]
    assert records[0]["metrics"] == {"train/loss": 2.5, "train/lr": 0.125}
    assert records[1]["metrics"] == {"train/loss": 1.5, "train/grad_norm": None}
    assert records[2]["metrics"] == {"AP": 0.25}
    assert all(isinstance(r["time"], float) for r in records)
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    scalars = _read_scalars(events[0])
    assert ("train/loss", 1, 2.5) in scalars and ("train/loss", 2, 1.5) in scalars
    assert ("AP", 2, 0.25) in scalars


def test_appends_on_resume(tmp_path):
    for step in (1, 2):
        with MetricsLogger(tmp_path) as logger:
            logger.log(step, {"loss": 1.0})
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_disabled_writes_nothing(tmp_path):
    logger = MetricsLogger(tmp_path / "run", enabled=False)
    logger.log(1, {"loss": 1.0})
    logger.close()
    assert not (tmp_path / "run").exists()


def test_rejects_non_scalars(tmp_path):
    with MetricsLogger(tmp_path) as logger, pytest.raises(ValueError, match="'loss'"):
        logger.log(1, {"loss": np.ones(3)})
