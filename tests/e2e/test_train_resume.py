"""End to end on generated data: one compile per run, exact resumption, eval files."""

import json
import shutil

import jax
import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from jaxdet import tasks
from jaxdet.jobs import runs
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state, make_train_step

pytestmark = pytest.mark.xdist_group("e2e")


def _batch_with_boxes(task, batch_size, max_boxes, num_boxes, rng):
    h, w = task.input_size
    boxes = np.zeros((batch_size, max_boxes, 4), np.float32)
    valid = np.zeros((batch_size, max_boxes), bool)
    for b in range(batch_size):
        n = num_boxes[b]
        tl = rng.uniform(0.0, 0.5, (n, 2))
        boxes[b, :n] = np.concatenate([tl, tl + rng.uniform(0.2, 0.5, (n, 2))], 1)
        valid[b, :n] = True
    return {
        "images": rng.normal(size=(batch_size, h, w, 3)).astype(np.float32),
        "boxes": boxes,
        "classes": rng.integers(0, task.num_classes, (batch_size, max_boxes)).astype(np.int32),
        "valid": valid,
        "ignore": np.zeros((batch_size, max_boxes), bool),
    }


def test_train_step_compiles_once_for_any_number_of_boxes(tiny_config):
    task = tasks.build_task(tiny_config)
    tx, schedule = train_build.build_optimizer(tiny_config.train)
    step = make_train_step(task, tx, schedule, ema_decay=0.9)
    state = init_train_state(task, tx, ema=True)
    rng = np.random.default_rng(0)
    before = _leaves(state["params"])
    for i, counts in enumerate(([0, 1, 2, 3], [8, 8, 0, 5], [1, 0, 0, 7])):
        state, metrics = step(state, _batch_with_boxes(task, 4, 8, counts, rng))
        if i == 0:  # EMA after one step: 0.9 * initial + 0.1 * updated
            for p0, p1, e in zip(before, _leaves(state["params"]), _leaves(state["ema_params"]),
                                 strict=True):
                np.testing.assert_allclose(e, 0.9 * p0 + 0.1 * p1, rtol=1e-5, atol=1e-6)
    assert np.isfinite(float(metrics["loss"]))
    assert int(state["step"]) == 3
    assert step._cache_size() == 1


def test_dynamic_ema_decay_warms_up_like_tf(tiny_config):
    """TF's num_updates / tfa's dynamic_decay: update t uses min(decay, (1 + t) / (10 + t))."""
    task = tasks.build_task(tiny_config)
    tx, schedule = train_build.build_optimizer(tiny_config.train)
    step = make_train_step(task, tx, schedule, ema_decay=0.9998, ema_dynamic_decay=True)
    state = init_train_state(task, tx, ema=True)
    rng = np.random.default_rng(0)
    for t in range(2):
        ema_before = _leaves(state["ema_params"])
        state, _ = step(state, _batch_with_boxes(task, 4, 8, [1, 2, 0, 3], rng))
        decay = (1 + t) / (10 + t)
        for e0, p1, e1 in zip(ema_before, _leaves(state["params"]),
                              _leaves(state["ema_params"]), strict=True):
            np.testing.assert_allclose(e1, decay * e0 + (1 - decay) * p1, rtol=1e-5, atol=1e-6)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def test_killed_run_resumes_to_the_same_parameters(tiny_config, tmp_path):
    full = runs.train(tiny_config, tmp_path / "full", progress=False, evaluate=False)
    killed = runs.train(tiny_config, tmp_path / "resumed", stop_after=4, progress=False,
                        evaluate=False)
    assert killed.step == 4
    # the kill happened after step 4; the latest checkpoint is step 3, so 4 is recomputed
    resumed = runs.train(tiny_config, tmp_path / "resumed", progress=False, evaluate=False)
    assert resumed.step == full.step == 6
    for a, b in zip(_leaves(full.state["params"]), _leaves(resumed.state["params"]), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(full.state["batch_stats"]), _leaves(resumed.state["batch_stats"]),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    # step 4, logged by the killed run and again after resuming, is in the log once
    rows = [json.loads(line) for line in
            (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]


def test_resuming_with_changed_training_fields_warns_and_keeps_the_old_config(
        tiny_config, tmp_path, caplog):
    runs.train(tiny_config, tmp_path, progress=False, evaluate=False)
    first = (tmp_path / "config.yaml").read_text()
    longer = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(
        update={"num_steps": 7, "batch_size": 2})})
    with caplog.at_level("WARNING", logger="jaxdet"):
        result = runs.train(longer, tmp_path, progress=False, evaluate=False)
    assert result.step == 7
    assert "train.batch_size 4 -> 2, train.num_steps 6 -> 7" in caplog.text
    assert (tmp_path / "config.yaml.1").read_text() == first
    # other training data: refused before the generated data is touched
    data = tmp_path / "data" / "train" / "annotations.json"
    stamp = data.stat().st_mtime_ns
    more = longer.model_copy(update={"data": longer.data.model_copy(update={
        "train": longer.data.train.model_copy(update={"num_images": 30})})})
    with pytest.raises(ValueError, match="data.train.num_images 24 -> 30"):
        runs.train(more, tmp_path, progress=False, evaluate=False)
    assert data.stat().st_mtime_ns == stamp


def test_a_damaged_latest_checkpoint_is_set_aside_and_retrained(tiny_config, tmp_path, caplog):
    """Step 6's largest file truncated: eval-side readers use step 3; the next train run moves
    step 6 to damaged_checkpoints/, resumes from 3 and ends with the uninterrupted parameters."""
    full = runs.train(tiny_config, tmp_path / "full", progress=False, evaluate=False)
    shutil.copytree(tmp_path / "full", tmp_path / "hurt")
    files = [p for p in (tmp_path / "hurt" / "checkpoints" / "6").rglob("*") if p.is_file()]
    victim = max(files, key=lambda p: p.stat().st_size)
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size - 100)
    with caplog.at_level("WARNING", logger="jaxdet"):
        _, _, step = runs.restore_for_inference(tiny_config, tmp_path / "hurt")
        assert step == 3
        resumed = runs.train(tiny_config, tmp_path / "hurt", progress=False, evaluate=False)
    assert f"{victim.name} is " in caplog.text and "when written" in caplog.text
    assert resumed.step == 6 and resumed.steps_run == 3
    assert (tmp_path / "hurt" / "damaged_checkpoints" / "6").is_dir()
    for a, b in zip(_leaves(full.state["params"]), _leaves(resumed.state["params"]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_refuses_a_workdir_from_another_config(tiny_config, tmp_path):
    runs.train(tiny_config, tmp_path, progress=False, evaluate=False)
    other = tiny_config.model_copy(
        update={"model": tiny_config.model.model_copy(update={"num_classes": 5})}
    )
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(runs.WorkdirMismatch, match="different model"):
        runs.train(other, tmp_path, progress=False, evaluate=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before



def test_a_run_in_optax_momentum_form_names_the_setting_that_continues_it(tiny_config, tmp_path):
    """A workdir written before a config switched to TF's momentum form is refused with the
    one setting that resumes it, and resumes with it."""
    runs.train(tiny_config, tmp_path, progress=False, evaluate=False)
    optimizer = tiny_config.train.optimizer
    keras = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={
        "optimizer": optimizer.model_copy(update={"momentum_form": "keras"})})})
    with pytest.raises(runs.WorkdirMismatch,
                       match=r"--set train\.optimizer\.momentum_form=optax to continue"):
        runs.train(keras, tmp_path, progress=False, evaluate=False)
    with pytest.raises(runs.WorkdirMismatch, match="momentum_form=optax"):
        runs.restore_for_inference(keras, tmp_path)
    _, _, step = runs.restore_for_inference(tiny_config, tmp_path)
    assert step == tiny_config.train.num_steps

def test_eval_writes_coco_files_that_pycocotools_agrees_with(tiny_config, tmp_path):
    runs.train(tiny_config, tmp_path, progress=False, evaluate=False)
    metrics = runs.evaluate(tiny_config, tmp_path, progress=False)
    out = tmp_path / "eval" / "step_6"
    written = json.loads((out / "metrics.json").read_text())
    detections = json.loads((out / "detections.json").read_text())
    assert metrics["num_images"] == 10
    assert detections, "an untrained detector with a low score threshold still detects"
    # boxes are in original-image pixels: the eval images are 80 wide, 64 high
    xs = np.array([d["bbox"][0] + d["bbox"][2] for d in detections])
    ys = np.array([d["bbox"][1] + d["bbox"][3] for d in detections])
    assert xs.max() <= 80.0 + 1e-3 and ys.max() <= 64.0 + 1e-3
    gt = COCO(str(tmp_path / "data" / "eval" / "annotations.json"))
    ev = COCOeval(gt, gt.loadRes(str(out / "detections.json")), "bbox")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    names = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100"]
    for i, name in enumerate(names):
        assert written[name] == pytest.approx(ev.stats[i], abs=1e-9), name
