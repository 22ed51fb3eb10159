"""Configs read from a bucket (the GCS emulator of tests/gcs_emulator.py): a TF OD API
pipeline.config and a YAML config whose ``base:`` sits beside it convert and validate exactly
as the same files on local disk; the CLI takes the gs:// path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gcs_emulator
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import load_pipeline_config

ZOO = (Path(__file__).parents[1] / "interop" / "fixtures"
       / "tf_ssd_mobilenet_v2_320x320_coco17_tpu-8" / "pipeline.config")


def test_pipeline_config_and_yaml_from_a_bucket_equal_local_ones(tmp_path, gcs):
    pipeline = gcs.upload(ZOO, "configs/pipeline.config")
    assert (load_pipeline_config(pipeline).model_dump()
            == load_pipeline_config(ZOO).model_dump())

    (tmp_path / "base.yaml").write_text("base: shapes_demo\ntrain: {batch_size: 3}\n")
    (tmp_path / "run.yaml").write_text("base: base.yaml\ntrain: {num_steps: 7}\n")
    remote = gcs.upload(tmp_path, "configs/yaml")
    mine, theirs = load_config(f"{remote}/run.yaml"), load_config(tmp_path / "run.yaml")
    assert (mine.train.batch_size, mine.train.num_steps) == (3, 7)
    assert mine.model_dump() == theirs.model_dump()


def test_the_cli_reads_a_pipeline_config_from_a_bucket(gcs):
    pipeline = gcs.upload(ZOO, "configs/cli/pipeline.config")
    done = subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "summary",
                           "--pipeline-config", pipeline], capture_output=True, text=True,
                          env=gcs_emulator.environ_for(gcs), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "input 300 x 300 x 3" in done.stdout

    missing = subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "summary",
                              "--pipeline-config", f"gs://{gcs.bucket}/nowhere.config"],
                             capture_output=True, text=True, env=gcs_emulator.environ_for(gcs),
                             timeout=300, check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"config error: pipeline config gs://{gcs.bucket}/nowhere.config does not exist"]


def test_convert_config_writes_its_yaml_into_a_bucket(gcs, tmp_path):
    """``jaxdet convert-config --out gs://...``: the same YAML as written to disk, and the
    command names the bucket's path."""
    from jaxdet import files
    from jaxdet.cli.main import main

    pipeline = gcs.upload(ZOO, "configs/convert/pipeline.config")
    out = f"gs://{gcs.bucket}/configs/convert/jaxdet.yaml"
    assert main(["convert-config", pipeline, "--out", out]) == 0
    assert main(["convert-config", str(ZOO), "--out", str(tmp_path / "jaxdet.yaml")]) == 0
    mine, theirs = files.read_text(out), (tmp_path / "jaxdet.yaml").read_text()
    assert mine.replace(pipeline, str(ZOO)) == theirs
    assert load_config(out).model_dump() == load_config(tmp_path / "jaxdet.yaml").model_dump()
