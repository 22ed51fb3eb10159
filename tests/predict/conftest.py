"""A tiny trained workdir, made once per session (the tiny config of tests/e2e/conftest.py)."""

from pathlib import Path

import pytest

from jaxdet import runs
from jaxdet.config.loader import load_config

TINY = [
    "name=tiny",
    "model.backbone.depth_multiplier=0.25",
    "model.neck.depth=16",
    "model.head.depth=16",
    "model.head.num_layers_before_predictor=1",
    "model.post_processing.pre_nms_top_k=64",
    "model.post_processing.score_threshold=0.0",
    "model.post_processing.max_detections_per_class=10",
    "model.post_processing.max_total_detections=10",
    "data.resizer.height=64",
    "data.resizer.width=64",
    "data.train.num_images=24",
    "data.train.image_size=[64, 64]",
    "data.train.output_dir=data/train",
    "data.eval.num_images=10",
    "data.eval.image_size=[64, 80]",
    "data.eval.output_dir=data/eval",
    "data.max_number_of_boxes=8",
    "train.batch_size=4",
    "train.num_steps=6",
    "train.checkpoint_every=3",
    "train.log_every=1",
    "train.learning_rate.warmup_steps=2",
    "eval.batch_size=4",
    "eval.num_visualizations=2",
]


@pytest.fixture(scope="session")
def tiny_config():
    return load_config("shapes_demo", TINY)


@pytest.fixture(scope="session")
def trained(tiny_config, tmp_path_factory) -> Path:
    """Workdir trained 6 steps; its final eval wrote eval/step_6/{detections.json,samples.png}."""
    workdir = tmp_path_factory.mktemp("tiny_run")
    runs.train(tiny_config, workdir, progress=False)
    return workdir
