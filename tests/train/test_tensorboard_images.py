"""Evaluation pictures in TensorBoard: each evaluation of a training run writes the panels of
its ``samples.png`` (ground truth left, predictions right) as images ``eval_side_by_side_<k>``
at the checkpoint's step, into the event files that hold its eval scalars; an evaluation by
``jaxdet eval --watch`` with ``eval.num_visualizations=0`` writes none."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from jaxdet.config.loader import load_config
from jaxdet.eval.visualize import title_height
from jaxdet.jobs import eval_watch, runs
from jaxdet.train.metrics_log import MetricsLogger
from tensorboard_events import read_images, read_scalars

pytestmark = pytest.mark.xdist_group("shapes_demo")

GAP = 4  # eval.visualize.image_grid's white border between cells


def _sheet_panels(sheet: np.ndarray, rows: int, cell_h: int, cell_w: int) -> list[np.ndarray]:
    """Row r of a samples.png grid as one picture: its ground-truth cell joined to its
    predictions cell (cells of cell_h x cell_w under a title band)."""
    band = title_height((cell_w, cell_h))
    assert sheet.shape == (rows * (band + cell_h) + (rows + 1) * GAP,
                           2 * cell_w + 3 * GAP, 3)
    out = []
    for r in range(rows):
        top = GAP + r * (band + cell_h + GAP) + band
        cells = [sheet[top:top + cell_h, left:left + cell_w]
                 for left in (GAP, 2 * GAP + cell_w)]
        out.append(np.concatenate(cells, axis=1))
    return out


def test_each_evaluation_logs_the_samples_panels_at_its_step(tiny_overrides, tmp_path):
    workdir = tmp_path / "run"
    # the suite's tiny config (its programs are the ones other tests compile), evaluated at its
    # end, step 6
    config = load_config("shapes_demo", [*tiny_overrides, "eval.num_visualizations=2"])
    runs.train(config, workdir, progress=False)

    images = read_images(workdir / "tensorboard")
    tags = [f"eval_side_by_side_{k}" for k in range(2)]
    assert sorted(images) == [(tag, 6) for tag in tags]
    # in the event stream of the run's eval scalars, at the same step
    assert ("eval/AP", 6) in read_scalars(workdir / "tensorboard")
    pictures = [images[tag, 6] for tag in tags]
    # eval images 64 x 80, drawn with their longer side 320 (as in samples.png)
    assert all(p.shape == (256, 640, 3) and p.dtype == np.uint8 for p in pictures)
    sheet = np.asarray(Image.open(workdir / "eval" / "step_6" / "samples.png").convert("RGB"))
    for picture, panel in zip(pictures, _sheet_panels(sheet, 2, 256, 320), strict=True):
        np.testing.assert_array_equal(picture, panel)
        # ground truth on the left, the (untrained) model's detections on the right
        assert not np.array_equal(picture[:, :320], picture[:, 320:])

    # eval.num_visualizations=0: an evaluation by jaxdet eval --watch logs no pictures
    (workdir / "eval" / "step_6" / "metrics.json").unlink()  # not evaluated yet, for it
    quiet = load_config("shapes_demo", [*tiny_overrides, "eval.num_visualizations=0"])
    results = eval_watch.watch_checkpoints(quiet, workdir, timeout=0.5, poll=0.1)
    assert [m["step"] for m in results] == [6]
    assert ("eval/AP", 6) in read_scalars(workdir / "eval_watch" / "tensorboard")
    assert read_images(workdir / "eval_watch" / "tensorboard") == {}


def test_log_images_takes_uint8_hwc_and_a_disabled_logger_writes_nothing(tmp_path):
    picture = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    with MetricsLogger(tmp_path / "run") as logger:
        logger.log_images(5, {"eval_side_by_side_0": picture})
        with pytest.raises(ValueError, match="uint8"):
            logger.log_images(5, {"bad": picture.astype(np.float32)})
    np.testing.assert_array_equal(
        read_images(tmp_path / "run" / "tensorboard")["eval_side_by_side_0", 5], picture)
    off = MetricsLogger(tmp_path / "off", enabled=False)
    off.log_images(1, {"eval_side_by_side_0": picture})
    off.close()
    assert not (tmp_path / "off").exists()
