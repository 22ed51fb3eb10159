"""Training pictures from a workdir's ``metrics.jsonl``: ``curves.png`` with the loss
components, the learning rate and the evaluation AP over steps (the run's own evaluations and
those of ``jaxdet eval --watch``, logged to ``eval_watch/metrics.jsonl``).

``metrics.jsonl`` holds one JSON object per logged step, ``{"step": int, "time": float,
"metrics": {name: value or null}}`` (see ``train.metrics_log``); training metrics are named
``train/<name>`` and evaluation metrics ``eval/<name>``. A resumed run appends to the same file
and may log a step again: the last value wins. matplotlib is imported only when drawing, with
the non-interactive Agg canvas (no display needed, no pyplot global state).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import numpy as np

log = logging.getLogger("jaxdet")

CURVES_FILE = "curves.png"
RUN_METRICS = Path("metrics.jsonl")  # written by the run (train.metrics_log)
WATCH_METRICS = Path("eval_watch") / "metrics.jsonl"  # written by ``jaxdet eval --watch``
# metrics.jsonl name (after "eval/") -> legend label
EVAL_CURVES = {"AP": "AP", "AP50": "AP50", "PascalBoxes_Precision/mAP@0.5IOU": "VOC mAP@0.5"}


def read_metrics_jsonl(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (steps [n] int64 ascending, values [n] float64)}`` from a metrics.jsonl file.

    ``null`` values (non-finite when logged) become NaN. When a step appears more than once
    (a resumed run repeating the steps after its last checkpoint) the last line wins. A line
    that is not JSON (a run killed mid-write) is skipped with a warning.
    """
    path = Path(path)
    by_name: dict[str, dict[int, float]] = {}
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
                step = int(record["step"])
                metrics = record["metrics"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("%s:%d: skipped a line that is not a metrics record", path, line_no)
                continue
            for name, value in metrics.items():
                by_name.setdefault(name, {})[step] = math.nan if value is None else float(value)
    out = {}
    for name, values in by_name.items():
        steps = np.array(sorted(values), dtype=np.int64)
        out[name] = (steps, np.array([values[int(s)] for s in steps], dtype=np.float64))
    return out


def read_training_metrics(workdir: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The series ``curves.png`` draws: ``workdir/metrics.jsonl`` (as :func:`read_metrics_jsonl`)
    with the ``eval/*`` series of ``workdir/eval_watch/metrics.jsonl`` merged in, when a watcher
    wrote one. At a step both evaluated, the run's own value wins.

    Raises FileNotFoundError when ``workdir/metrics.jsonl`` does not exist.
    """
    workdir = Path(workdir)
    jsonl = workdir / RUN_METRICS
    if not jsonl.is_file():
        raise FileNotFoundError(f"{jsonl} does not exist: nothing to plot")
    metrics = read_metrics_jsonl(jsonl)
    watched = workdir / WATCH_METRICS
    if not watched.is_file():
        return metrics
    for name, (steps, values) in read_metrics_jsonl(watched).items():
        if not name.startswith("eval/"):
            continue
        merged = dict(zip(steps.tolist(), values.tolist(), strict=True))
        if name in metrics:
            own_steps, own_values = metrics[name]
            merged.update(zip(own_steps.tolist(), own_values.tolist(), strict=True))
        order = sorted(merged)
        metrics[name] = (np.array(order, dtype=np.int64),
                         np.array([merged[s] for s in order], dtype=np.float64))
    return metrics


def _loss_names(metrics: dict) -> list[str]:
    """``train/loss`` (the total) last, after its components ``train/*_loss``."""
    parts = sorted(n for n in metrics if n.startswith("train/") and n.endswith("_loss"))
    return parts + (["train/loss"] if "train/loss" in metrics else [])


def _spans_decades(series: list[np.ndarray]) -> bool:
    values = np.concatenate([v[np.isfinite(v)] for v in series]) if series else np.array([])
    if values.size == 0 or values.min() <= 0:
        return False
    return values.max() / values.min() > 10.0


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            fontsize=12, color="0.4")


def plot_training_curves(workdir: str | Path) -> Path:
    """Draw ``workdir/curves.png`` from ``workdir/metrics.jsonl`` (and the evaluations of a
    ``jaxdet eval --watch`` beside the run, see :func:`read_training_metrics`) and return its
    path.

    Panels: (1) loss components and total over steps (log y when the values span more than
    one decade), (2) learning rate, (3) evaluation AP and AP50 over steps, or a note when
    there has been no evaluation yet. The file is replaced atomically, so the run and a
    watcher may both redraw it.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    workdir = Path(workdir)
    metrics = read_training_metrics(workdir)

    fig = Figure(figsize=(15, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_lr, ax_eval = fig.subplots(1, 3, sharex=True)

    names = _loss_names(metrics)
    for name in names:
        steps, values = metrics[name]
        total = name == "train/loss"
        ax_loss.plot(steps, values, label=name.removeprefix("train/"),
                     color="black" if total else None, linewidth=2.0 if total else 1.2)
    if names:
        if _spans_decades([metrics[n][1] for n in names]):
            ax_loss.set_yscale("log")
        ax_loss.legend(loc="upper right", fontsize=8)
    else:
        _note(ax_loss, "no training loss logged yet")
    ax_loss.set_title("training loss")

    if "train/learning_rate" in metrics:
        steps, values = metrics["train/learning_rate"]
        ax_lr.plot(steps, values, color="tab:green")
        ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    else:
        _note(ax_lr, "no learning rate logged yet")
    ax_lr.set_title("learning rate")

    present = [n for n in EVAL_CURVES if f"eval/{n}" in metrics]
    for name in present:
        steps, values = metrics[f"eval/{name}"]
        values = np.where(values < 0, np.nan, values)  # pycocotools' -1: undefined
        finite = values[np.isfinite(values)]
        short = EVAL_CURVES[name]
        label = f"{short} ({finite[-1]:.3f})" if finite.size else short
        ax_eval.plot(steps, values, marker="o", label=label)
    if present:
        ax_eval.set_ylim(bottom=0.0)
        ax_eval.legend(loc="lower right", fontsize=8)
    else:
        _note(ax_eval, "no evaluation yet")
    ax_eval.set_title("evaluation")

    last = max((int(s[-1]) for s, _ in metrics.values() if s.size), default=0)
    fig.suptitle(f"{workdir.resolve().name}: step {last:,}")
    for ax in (ax_loss, ax_lr, ax_eval):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)

    out = workdir / CURVES_FILE
    tmp = workdir / f".{CURVES_FILE}.{os.getpid()}.tmp"  # one per writer: run and watcher
    fig.savefig(tmp, format="png")
    os.replace(tmp, out)
    return out


def curves_are_current(workdir: str | Path) -> bool:
    """True when ``workdir/curves.png`` is newer than every log it is drawn from
    (``metrics.jsonl`` and a watcher's), so that drawing it again would give the same
    picture."""
    workdir = Path(workdir)
    try:
        drawn = (workdir / CURVES_FILE).stat().st_mtime_ns
    except FileNotFoundError:
        return False
    logs = [workdir / RUN_METRICS, workdir / WATCH_METRICS]
    return all(not p.is_file() or p.stat().st_mtime_ns < drawn for p in logs)


def try_plot_training_curves(workdir: str | Path, *, unless_current: bool = False
                             ) -> Path | None:
    """:func:`plot_training_curves`, but a failure is logged as a warning and returns None:
    drawing pictures must never stop a training run or hide the error that ended it. With
    ``unless_current``, a picture newer than its logs is left as it is (and returned)."""
    if unless_current and curves_are_current(workdir):
        return Path(workdir) / CURVES_FILE
    try:
        return plot_training_curves(workdir)
    except Exception as err:
        log.warning("could not draw %s: %s: %s", Path(workdir) / CURVES_FILE,
                    type(err).__name__, err)
        return None


__all__ = ["read_metrics_jsonl", "read_training_metrics", "plot_training_curves",
           "curves_are_current", "try_plot_training_curves"]
