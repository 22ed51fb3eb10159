"""The linear scaling rule (``train.reference_batch_size``) and the warning when a resume
changes the global batch."""

from __future__ import annotations

import logging

import pytest

from jaxdet.config.changes import batch_change_warning
from jaxdet.config.loader import load_config
from jaxdet.jobs import runs
from jaxdet.train.build import build_schedule

COSINE = ["train.learning_rate={name: cosine, learning_rate_base: 0.08, "
          "warmup_learning_rate: 0.02, warmup_steps: 10}", "train.num_steps=100"]


@pytest.mark.parametrize(("batch", "reference", "factor"),
                         [(64, 64, 1.0), (256, 64, 4.0), (16, 64, 0.25), (64, None, 1.0)])
def test_every_rate_of_the_schedule_scales_with_the_batch(batch, reference, factor):
    plain = build_schedule(load_config("shapes_demo", COSINE).train)
    ref = [] if reference is None else [f"train.reference_batch_size={reference}"]
    scaled = build_schedule(load_config(
        "shapes_demo", [*COSINE, f"train.batch_size={batch}", *ref]).train)
    for step in (0, 5, 10, 50, 99):  # warm-up, peak, decay
        assert float(scaled(step)) == pytest.approx(factor * float(plain(step)), rel=1e-6)
    assert float(scaled(10)) == pytest.approx(0.08 * factor, rel=1e-6)  # the base rate


def test_the_warning_names_both_batches_and_what_the_rate_does():
    changes = {"train.batch_size": (64, 128)}
    assert batch_change_warning({"train.num_steps": (10, 20)}, None) is None
    assert batch_change_warning(changes, None) == (
        "the global batch changed from 64 to 128 on resume: the steps already trained saw 64 "
        "images each, the rest will see 128; the learning rate stays as configured; set "
        "train.reference_batch_size to scale it with the batch (the linear scaling rule)")
    assert batch_change_warning(changes, 32).endswith(
        "the learning rate now scales by 128/32 (it scaled by 64/32): "
        "train.reference_batch_size")


@pytest.mark.xdist_group("e2e")
def test_a_resume_with_another_global_batch_warns(tiny_overrides, tmp_path, caplog):
    config = load_config("shapes_demo", [*tiny_overrides, "train.num_steps=3"])
    runs.train(config, tmp_path, progress=False, evaluate=False)
    bigger = load_config("shapes_demo", [*tiny_overrides, "train.num_steps=4",
                                         "train.batch_size=8", "train.reference_batch_size=4"])
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        runs.train(bigger, tmp_path, progress=False, evaluate=False)
    said = [r.getMessage() for r in caplog.records if "global batch" in r.getMessage()]
    assert said == ["the global batch changed from 4 to 8 on resume: the steps already trained "
                    "saw 4 images each, the rest will see 8; the learning rate now scales by "
                    "8/4 (it scaled by 4/4): train.reference_batch_size"]
