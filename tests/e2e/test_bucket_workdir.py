"""A TF OD API team's job with everything in a bucket (the GCS emulator of
tests/gcs_emulator.py): ``jaxdet train --pipeline-config gs://... --workdir gs://...`` on
TFRecords and a label map in the bucket, checkpoints written by orbax straight into the
bucket, stopped (a checkpoint half written) and resumed on a "new machine" (an empty staging
folder) to the parameters of an uninterrupted run; ``jaxdet
eval --watch``, ``jaxdet eval`` and ``jaxdet predict`` on the bucket's workdir, results written
back to it; killed with SIGKILL as a process under ``-m exhaustive``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import gcs_emulator
from jaxdet import files
from jaxdet.cli.main import main
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.data.coco import CocoSource
from jaxdet.data.shapes import generate_shapes
from jaxdet.jobs import runs
from jaxdet.jobs.convert_dataset import source_to_tfrecord
from jaxdet.train.checkpoint import Checkpointer
from tfod_pipeline import PIPELINE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

STEPS, EVERY = 16, 4
SETS = ["parallel.data=1", "train.init_checkpoint=null", f"train.num_steps={STEPS}",
        f"train.checkpoint_every={EVERY}", "train.keep_checkpoints=2"]


@pytest.fixture(scope="module")
def bucket(gcs, tmp_path_factory) -> str:
    """TFRecords (train in 2 shards), a label map and a pipeline.config naming them, all in
    the bucket; returns the bucket folder."""
    root = tmp_path_factory.mktemp("bucket_data")
    url = f"gs://{gcs.bucket}/e2e"
    for split, n, seed, shards in (("train", 16, 0, 2), ("eval", 6, 1, 1)):
        ann = generate_shapes(root / f"shapes_{split}", n, image_size=(64, 64), seed=seed)
        source = CocoSource(ann, Path(ann).parent / "images")
        source_to_tfrecord(source, root / "data" / f"{split}.tfrecord", shards=shards,
                           label_map_out=root / "data" / "label_map.pbtxt", progress=False)
        if split == "eval":  # photos for predict
            gcs.upload(Path(ann).parent / "images", "e2e/photos")
    gcs.upload(root / "data", "e2e/data")
    text = (PIPELINE.replace("LABEL_MAP", f"{url}/data/label_map.pbtxt")
            .replace("TRAIN_GLOB", f"{url}/data/train.tfrecord-?????-of-00002")
            .replace("EVAL_FILE", f"{url}/data/eval.tfrecord"))
    files.write_text(f"{url}/pipeline.config", text)
    return url


def _sealed_steps(workdir: str) -> list[int]:
    found = files.glob(f"{workdir}/checkpoints/*/jaxdet_checksums.json")
    return sorted(int(p.split("/")[-2]) for p in found)


def _train_command(bucket: str, workdir: str | Path) -> list[str]:
    return [sys.executable, "-m", "jaxdet.cli.main", "train", "--pipeline-config",
            f"{bucket}/pipeline.config", "--workdir", str(workdir), "--no-eval",
            "--no-progress", *[a for s in SETS for a in ("--set", s)]]


def _staged_copy(machine: Path) -> Path:
    """The staging folder of the one run trained on ``machine`` (beside it: its versions file)."""
    return next(p for p in (machine / "train").iterdir() if p.is_dir())


def _final_state(workdir: Path | str) -> dict:
    checkpoints = Checkpointer(files.join(workdir, "checkpoints"), read_only=True)
    try:
        return checkpoints.restore_raw(checkpoints.latest_step())
    finally:
        checkpoints.close()


def _half_written(workdir: str, step: int, like: int) -> None:
    """What a machine killed while orbax wrote checkpoint ``step`` leaves in the bucket: the
    objects of a checkpoint (those of checkpoint ``like``) without orbax's commit markers
    (``commit_success.txt``) and the seal."""
    for name in files.glob(f"{workdir}/checkpoints/{like}/**", files_only=True):
        if not name.endswith(("jaxdet_checksums.json", "commit_success.txt")):
            rel = name.split(f"/checkpoints/{like}/", 1)[1]
            files.write_bytes(f"{workdir}/checkpoints/{step}/{rel}", files.read_bytes(name))


def test_stopped_in_a_bucket_resumes_elsewhere_to_the_same_parameters(bucket, gcs, tmp_path,
                                                                      monkeypatch, capsys):
    """Training stopped on machine A after step 10 (checkpoints 4 and 8 committed and sealed
    in the bucket, 12 half written) resumes on machine B, an empty staging folder, with
    the same command, to the parameters of an uninterrupted run; ``jaxdet eval --watch``,
    ``jaxdet eval``,
    ``jaxdet predict``, the Python API and ``jaxdet export`` then read the bucket's run and
    write back to it. In one process (the process-level SIGKILL variant runs under
    ``-m exhaustive``; a signal to a ``jaxdet train`` process is in the preemption tests)."""
    workdir = f"{bucket}/run"
    config = load_pipeline_config(f"{bucket}/pipeline.config", SETS)
    monkeypatch.setenv("JAXDET_STAGING_DIR", str(tmp_path / "machine_a"))
    runs.train(config, workdir, stop_after=10, progress=False, evaluate=False)
    assert _sealed_steps(workdir) == [4, 8]
    lock = json.loads(files.read_text(f"{workdir}/.jaxdet-train.lock"))
    assert lock["released"] and lock["pid"] > 0  # the bucket lock, given up at the end
    _half_written(workdir, 12, like=8)

    monkeypatch.setenv("JAXDET_STAGING_DIR", str(tmp_path / "machine_b"))
    capsys.readouterr()
    assert main(_train_command(bucket, workdir)[3:]) == 0  # the `jaxdet` command, in-process
    assert f"trained {STEPS - 8} steps (9-{STEPS})" in capsys.readouterr().out
    assert _sealed_steps(workdir) == [STEPS - EVERY, STEPS]  # keep_checkpoints=2, in the bucket
    assert files.isfile(f"{workdir}/config.yaml") and files.isfile(f"{workdir}/metrics.jsonl")
    staged = _staged_copy(tmp_path / "machine_b")  # B's copy of the bucket's other files
    assert (staged / "metrics.jsonl").is_file() and not (staged / "checkpoints").exists()

    runs.train(config, tmp_path / "uninterrupted", progress=False, evaluate=False)
    resumed, reference = _final_state(workdir), _final_state(tmp_path / "uninterrupted")
    for part in ("params", "batch_stats"):
        jax.tree.map(np.testing.assert_array_equal, resumed[part], reference[part])
    _readers_on_the_bucket(bucket, workdir)


def _readers_on_the_bucket(bucket: str, workdir: str) -> None:
    """Readers on the bucket's workdir, each from its own staging copy; results go back up."""
    assert main(["eval", "--watch", "--workdir", workdir, "--timeout", "5", "--poll", "0.5",
                 "--no-progress"]) == 0
    watched = json.loads(files.read_text(f"{workdir}/eval/step_{STEPS}/metrics.json"))
    assert watched["num_images"] == 6
    assert main(["eval", "--workdir", workdir, "--out", f"{bucket}/eval_again",
                 "--no-progress"]) == 0
    again = json.loads(files.read_text(f"{bucket}/eval_again/metrics.json"))
    assert again["AP"] == pytest.approx(watched["AP"])
    assert main(["predict", "--workdir", workdir, f"{bucket}/photos", "--out",
                 f"{bucket}/predicted", "--no-progress"]) == 0
    predicted = json.loads(files.read_text(f"{bucket}/predicted/predictions.json"))
    assert predicted["num_images"] == 6
    assert all(e["image"].startswith(f"{bucket}/photos/") for e in predicted["images"])
    import jaxdet

    detector = jaxdet.load(workdir)  # the Python API on the bucket's run
    photo = files.glob(f"{bucket}/photos/*")[0]
    mine = detector.predict(photo)
    theirs = next(e for e in predicted["images"] if e["image"] == photo)
    assert len(mine) == len(theirs["detections"])
    assert main(["export", "--workdir", workdir, "--out", f"{bucket}/exported"]) == 0
    signature = json.loads(files.read_text(f"{bucket}/exported/signature.json"))
    assert signature["format"] == "stablehlo"


@pytest.mark.exhaustive
def test_killed_in_a_bucket_resumes_elsewhere_to_the_same_parameters(bucket, gcs, tmp_path,
                                                                     monkeypatch):
    """Every run is a ``jaxdet train`` process, as users start it: SIGKILL after the first
    sealed checkpoint, the same command on an empty staging folder, an uninterrupted run."""
    workdir = f"{bucket}/killed"
    env = gcs_emulator.environ_for(gcs)
    proc = subprocess.Popen(_train_command(bucket, workdir),
                            env={**env, "JAXDET_STAGING_DIR": str(tmp_path / "machine_a")},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not _sealed_steps(workdir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    output = proc.communicate()[0]
    assert proc.returncode == -signal.SIGKILL, output  # killed before the end
    killed_at = _sealed_steps(workdir)
    assert killed_at and killed_at[-1] < STEPS, output

    # another machine: nothing staged; the same command resumes from what the bucket holds
    machine_b = tmp_path / "machine_b"
    done = subprocess.run(_train_command(bucket, workdir), capture_output=True, text=True,
                          env={**env, "JAXDET_STAGING_DIR": str(machine_b)}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"trained {STEPS - killed_at[-1]} steps ({killed_at[-1] + 1}-{STEPS})" in done.stdout
    assert _sealed_steps(workdir) == [STEPS - EVERY, STEPS]  # keep_checkpoints=2, in the bucket

    whole = subprocess.run(_train_command(bucket, tmp_path / "uninterrupted"),
                           capture_output=True, text=True, env=env, timeout=600)
    assert whole.returncode == 0, whole.stderr
    resumed, reference = _final_state(workdir), _final_state(tmp_path / "uninterrupted")
    for part in ("params", "batch_stats"):
        jax.tree.map(np.testing.assert_array_equal, resumed[part], reference[part])


def test_a_missing_bucket_is_one_line_before_anything_runs(gcs, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.setenv("JAXDET_STAGING_DIR", str(tmp_path))
    assert main(["train", "--config", "shapes_demo", "--workdir",
                 "gs://no-such-bucket/run"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: gs://no-such-bucket/run: the bucket gs://no-such-bucket does not "
                   "exist (create it first, e.g. gcloud storage buckets create "
                   "gs://no-such-bucket)"]
    assert not any(tmp_path.rglob("*.yaml"))  # nothing staged, nothing trained
