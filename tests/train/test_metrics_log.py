"""MetricsLogger: JSONL lines and TensorBoard event files; a disabled logger writes nothing."""

import json
import struct
import subprocess
import sys
import time

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


def test_resume_drops_the_rows_a_killed_run_logged_after_its_checkpoint(tmp_path):
    """A run killed at step 5 with its last checkpoint at step 3 logged 4 and 5 (and half a
    line); resumed from 3, it logs 4 and 5 again: each step appears once in the end."""
    with MetricsLogger(tmp_path) as logger:
        for step in range(1, 6):
            logger.log(step, {"loss": float(step)}, prefix="train")
        logger.log(3, {"AP": 0.5}, prefix="eval")
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "ti')  # cut off by the kill
    time.sleep(1.05)  # event files are named by the second: a resumed run is a new file
    with MetricsLogger(tmp_path, resume_step=3) as logger:
        for step in (4, 5, 6):
            logger.log(step, {"loss": 10.0 + step}, prefix="train")
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], list(r["metrics"])) for r in records] == [
        (1, ["train/loss"]), (2, ["train/loss"]), (3, ["train/loss"]), (3, ["eval/AP"]),
        (4, ["train/loss"]), (5, ["train/loss"]), (6, ["train/loss"])]
    assert [r["metrics"]["train/loss"] for r in records if r["step"] >= 4] == [14.0, 15.0, 16.0]
    # TensorBoard: the resumed writer starts with a SessionLog START at step 4, which makes
    # TensorBoard drop the earlier file's events from step 4 on (its purge_step rule)
    files = sorted((tmp_path / "tensorboard").glob("events.out.tfevents.*"),
                   key=lambda f: f.stat().st_mtime_ns)
    assert len(files) == 2
    from tensorboardX.proto import event_pb2

    data, starts, pos = files[1].read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        if event.HasField("session_log"):
            starts.append((event.step, event.session_log.status))
    assert starts == [(4, event_pb2.SessionLog.START)]


def test_fresh_run_clears_rows_of_a_run_killed_before_its_first_checkpoint(tmp_path):
    with MetricsLogger(tmp_path) as logger:
        logger.log(1, {"loss": 1.0})
    with MetricsLogger(tmp_path, resume_step=0) as logger:
        logger.log(1, {"loss": 2.0})
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["metrics"]["loss"] for r in records] == [2.0]


def test_tensorboard_starts_without_loading_torch(tmp_path):
    """The logger leaves PyTorch (installed with the test extras) unloaded, its events are
    written all the same, and a later ``import torch`` works as usual."""
    pytest.importorskip("torch")  # without PyTorch there is nothing to leave unloaded
    code = (f"import sys\nfrom jaxdet.train.metrics_log import MetricsLogger\n"
            f"logger = MetricsLogger({str(tmp_path)!r})\n"
            f"logger.log(1, {{'loss': 0.5}})\nlogger.close()\n"
            f"print('torch' in sys.modules)\nimport torch\nprint(torch.ones(2).sum().item())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "2.0"]
    (events,) = (tmp_path / "tensorboard").glob("events.out.tfevents.*")
    assert _read_scalars(events) == [("loss", 1, 0.5)]


def test_tf_tags_in_tfs_model_dir_layout(tmp_path):
    """``tensorboard_tags="tf"``: training scalars in ``train/``, evaluation scalars and
    pictures in ``eval/``, under the TF OD API's tags, ``@`` and spaces kept; TF's total (the
    loss plus the regularization) and steps per second; metrics.jsonl as before."""
    from tensorboard_events import read_images, read_scalars

    with MetricsLogger(tmp_path / "run", tensorboard_tags="tf", batch_size=4) as logger:
        logger.log(10, {"loss": 2.0, "regularization_loss": 0.25, "classification_loss": 1.5,
                        "localization_loss": 0.5, "learning_rate": 0.01,
                        "images_per_second": 8.0, "grad_norm": 3.0}, prefix="train")
        logger.log(10, {"AP": 0.5, "AP50": 0.75, "APs": 0.125, "ARl": 0.875,
                        "segm/AP": 0.375,
                        "PascalBoxes_Precision/mAP@0.5IOU": 0.625}, prefix="eval")
        logger.log_images(10, {"eval_side_by_side_0": np.zeros((4, 8, 3), np.uint8)})
    run = tmp_path / "run"
    assert not (run / "tensorboard").exists()
    assert read_scalars(run / "train") == {
        ("Loss/total_loss", 10): 2.25, ("Loss/regularization_loss", 10): 0.25,
        ("Loss/classification_loss", 10): 1.5, ("Loss/localization_loss", 10): 0.5,
        ("learning_rate", 10): pytest.approx(0.01), ("steps_per_sec", 10): 2.0,
        ("loss", 10): 2.0, ("images_per_second", 10): 8.0, ("grad_norm", 10): 3.0}
    assert read_scalars(run / "eval") == {
        ("DetectionBoxes_Precision/mAP", 10): 0.5,
        ("DetectionBoxes_Precision/mAP@.50IOU", 10): 0.75,
        ("DetectionBoxes_Precision/mAP (small)", 10): 0.125,
        ("DetectionBoxes_Recall/AR@100 (large)", 10): 0.875,
        ("DetectionMasks_Precision/mAP", 10): 0.375,
        ("PascalBoxes_Precision/mAP@0.5IOU", 10): 0.625}
    assert list(read_images(run / "eval")) == [("eval_side_by_side_0", 10)]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["metrics"]["train/loss"] == 2.0 and rows[1]["metrics"]["eval/AP"] == 0.5
