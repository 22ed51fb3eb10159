"""What a config builds, without training it: parameters, anchors, output shapes, FLOPs.

``model_summary(config)`` builds the detector abstractly (``models.abstract.abstract_build``:
every parameter is a ``jax.ShapeDtypeStruct``, nothing large is allocated), counts its
parameters per component, traces its output shapes and, optionally, lowers and compiles one
eval-mode forward pass at batch 1 on abstract inputs to read XLA's FLOP count.
``format_summary`` turns the result into an aligned table; ``jaxdet summary --config C
[--json]`` prints one or the other.

About the FLOP count: it is XLA's ``cost_analysis()`` of the compiled forward pass on the
default backend. A multiply-add counts as 2 FLOPs, and convolution taps that fall on zero
padding are not counted (a 3x3 'same' conv on a 4x4 map does 100 of its 144 taps per
channel pair), so small feature maps cost less than ``2 * h * w * k * k * cin * cout``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx

from jaxdet.config.schema import Config
from jaxdet.core.precision import compute_dtype
from jaxdet.data import build as data_build
from jaxdet.data.stats import dataset_stats
from jaxdet.models.abstract import abstract_build
from jaxdet.models.inspect import (
    abstract_call,
    compiled_flops,
    count_parameters,
    leaf_paths,
    module_macs,
)
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.anchor_fit import (
    anchor_coverage,
    boxes_at_input,
    coverage_advice,
    level_anchor_sizes,
)

FLOPS_METHOD = "XLA cost analysis, batch 1, eval mode"
HEAD_BRANCHES = ("box", "class", "shared")


def head_branch(path: tuple[str, ...], shared_tower: bool = False) -> str:
    """``"box"``, ``"class"`` or ``"shared"`` for a head parameter path.

    The first path entry naming ``box*`` or ``class*`` decides (``box_tower``,
    ``class_predictor``, ``predictors/0/box_predictor``...); anything else, e.g. the per-level
    tower of ``ConvolutionalBoxPredictor`` that feeds both predictors, is shared. With
    ``shared_tower`` (``WeightSharedBoxPredictor(share_prediction_tower=True)``) only the
    predictors are branch-specific.
    """
    for name in path:
        for branch in ("box", "class"):
            if name.startswith(branch):
                if shared_tower and not name.endswith("predictor"):
                    return "shared"
                return branch
    return "shared"


def _shape(x: Any) -> list[int]:
    return [int(d) for d in x.shape]


# --------------------------------------------------------------------------- summary


def data_fit(config: Config, anchors_px: np.ndarray, *, split: str = "train",
             workdir: str | None = None) -> dict:
    """The dataset ``data.<split>`` against the anchors: :class:`DatasetStats` as a dict
    (``"dataset"``) and :func:`anchor_coverage` (``"coverage"``) at the argmax matcher's
    ``matched_threshold`` (0.5 for the bipartite matcher, which has none), plus
    ``"advice"`` lines, ``"split"`` and ``"matcher"``.

    Raises:
      ValueError: ``data.<split>`` is not set, or its files cannot be read.
    """

    cfg = getattr(config.data, split)
    if cfg is None:
        raise ValueError(f"data.{split} is not set: no dataset to compare the anchors with")
    source = data_build.build_source(cfg, workdir, num_classes=config.model.num_classes,
                                   field=f"data.{split}",
                                   keypoints=data_build.keypoint_specs(config),
                                   masks=data_build.load_masks(config))
    matcher = config.model.matcher
    threshold = matcher.matched_threshold if matcher.name == "argmax" else 0.5
    boxes = boxes_at_input(source, data_build.build_resizer(config.data).box_scale)
    coverage = anchor_coverage(boxes, anchors_px, threshold)
    return {"split": split, "dataset": dataset_stats(source).as_dict(), "coverage": coverage,
            "matcher": {"name": matcher.name, "threshold": threshold,
                        "force_match_for_each_row": matcher.name == "argmax"
                        and matcher.force_match_for_each_row},
            "advice": coverage_advice(coverage, config.model.anchors.name)}


def model_summary(config: Config, *, flops: bool = True, data: str | None = None,
                  workdir: str | None = None, data_required: bool = True) -> dict:
    """Describe the detector ``config`` builds. Returns a JSON-ready dict:

    - ``config``, ``description``, ``precision``, ``input_size`` [H, W], ``num_classes``,
      ``num_class_outputs`` (K = classes + background slot, if any);
    - ``parameters``: ``total``, ``components`` {backbone, neck, head}, ``head_branches``
      {box, class, shared}; ``batch_norm_statistics``: total and ``components`` (running
      mean/var entries, not trained);
    - ``anchors``: ``total`` A and ``levels`` [{level, feature_map [h, w],
      anchors_per_location, anchors, anchor_sizes_px (distinct sqrt(h*w) at the input),
      aspect_ratios (w/h)}];
    - ``outputs``: ``class_logits`` [1, A, K], ``box_encodings`` [1, A, 4] and ``levels``
      [{level, class_logits [1, n_l, K], box_encodings [1, n_l, 4]}];
    - ``multiply_adds``: ``total``, ``components`` {backbone, neck, head}: convolution and
      matmul multiply-adds counted from the jaxpr, full kernel taps (the convention of papers,
      e.g. EfficientDet's "FLOPs"; see ``jaxdet.models.inspect``); always computed, no compile;
    - ``flops`` (``None`` unless ``flops``): ``total``, ``gflops``, ``components``
      {backbone, neck, head}, ``method``, ``backend``;
    - ``data`` (``None`` unless ``data`` names a split, "train" or "eval"): :func:`data_fit`
      of that split (generated shapes are written under ``workdir``, default the current
      folder). With ``data_required=False`` a dataset that cannot be read is not an error:
      ``data_skipped`` says why.
    """
    model = abstract_build(lambda: ssd_build.build_model(config, seed=0))
    model.eval()
    height, width = data_build.input_size(config.data)
    dtype = compute_dtype(config.precision)
    images = jax.ShapeDtypeStruct((1, height, width, 3), dtype)

    # Shapes: the SSDDetector forward, one component at a time.
    backbone_out = abstract_call(model.backbone, images)
    features = backbone_out if model.neck is None else abstract_call(model.neck, backbone_out)
    features = {level: features[level] for level in sorted(features)}
    class_logits, box_encodings = abstract_call(model.head, features)
    levels = list(features)

    generator = ssd_build.build_anchor_generator(config.model)
    per_location = generator.num_anchors_per_location()
    anchors = ssd_build.build_anchors(config, model)
    anchor_levels = []
    for level, k in zip(levels, per_location, strict=True):
        h, w = (int(d) for d in features[level].shape[1:3])
        anchor_levels.append(
            {"level": level, "feature_map": [h, w], "anchors_per_location": int(k),
             "anchors": h * w * int(k)}
        )
    shapes = level_anchor_sizes(anchors * np.array([height, width, height, width]),
                                [lvl["anchors"] for lvl in anchor_levels], per_location)
    for lvl, shape in zip(anchor_levels, shapes, strict=True):
        lvl["anchor_sizes_px"] = shape["sizes_px"]
        lvl["aspect_ratios"] = shape["aspect_ratios"]

    components = {"backbone": model.backbone, "neck": model.neck, "head": model.head}
    params = {name: count_parameters(m, nnx.Param) for name, m in components.items()}
    stats = {name: count_parameters(m, nnx.BatchStat) for name, m in components.items()}
    shared_tower = bool(getattr(model.head, "share_prediction_tower", False))
    branches = dict.fromkeys(HEAD_BRANCHES, 0)
    for path, size in leaf_paths(nnx.state(model.head, nnx.Param)):
        branches[head_branch(path, shared_tower)] += size

    num_outputs = int(class_logits[0].shape[-1])
    box_code = int(box_encodings[0].shape[-1])
    total_anchors = int(anchors.shape[0])
    summary = {
        "config": config.name,
        "description": config.description,
        "precision": config.precision,
        "input_size": [height, width],
        "num_classes": config.model.num_classes,
        "num_class_outputs": num_outputs,
        "parameters": {
            "total": sum(params.values()),
            "components": params,
            "head_branches": branches,
        },
        "batch_norm_statistics": {"total": sum(stats.values()), "components": stats},
        "anchors": {"total": total_anchors, "levels": anchor_levels},
        "outputs": {
            "class_logits": [1, sum(int(c.shape[1]) for c in class_logits), num_outputs],
            "box_encodings": [1, sum(int(b.shape[1]) for b in box_encodings), box_code],
            "levels": [
                {"level": level, "class_logits": _shape(c), "box_encodings": _shape(b)}
                for level, c, b in zip(levels, class_logits, box_encodings, strict=True)
            ],
        },
        "flops": None,
        "data": None,
    }
    if data is not None:
        try:
            summary["data"] = data_fit(config, anchors * np.array([height, width, height, width]),
                                       split=data, workdir=workdir)
        except (OSError, ValueError) as err:  # ConfigError (a TF placeholder) is a ValueError
            if data_required:
                raise
            summary["data_skipped"] = str(err).splitlines()[0]
    macs = {"backbone": module_macs(model.backbone, images)}
    if model.neck is not None:
        macs["neck"] = module_macs(model.neck, backbone_out)
    macs["head"] = module_macs(model.head, features)
    summary["multiply_adds"] = {"total": sum(macs.values()), "components": macs}
    if flops:
        parts = {"backbone": compiled_flops(model.backbone, images)}
        if model.neck is not None:
            parts["neck"] = compiled_flops(model.neck, backbone_out)
        parts["head"] = compiled_flops(model.head, features)
        # The detector's forward is exactly backbone -> neck -> head, so the total is the sum
        # of the parts (one compile each; compiling the whole model as well would double the
        # time for the same number, within 0.1%: a test checks it).
        total = None if None in parts.values() else sum(parts.values())
        summary["flops"] = {
            "total": total,
            "gflops": None if total is None else total / 1e9,
            "components": parts,
            "method": FLOPS_METHOD,
            "backend": jax.default_backend(),
        }
    return summary


# --------------------------------------------------------------------------- text


def format_data_fit(fit: dict) -> list[str]:
    """Lines for the ``data`` entry of a summary: the dataset, then the anchor coverage."""
    ds, cov, matcher = fit["dataset"], fit["coverage"], fit["matcher"]
    size = ds["box_size_px"]
    lines = [f"data.{fit['split']}: {ds['images']:,} images ({ds['images_without_objects']:,} "
             f"without objects), {ds['boxes']:,} boxes"
             + (f" + {ds['crowd_boxes']:,} crowd" if ds["crowd_boxes"] else "")
             + (f", sizes {size['min']:.0f}-{size['max']:.0f} px (median {size['median']:.0f}) "
                "in the original images" if size else "")]
    lines.append("  boxes per class: " + ", ".join(
        f"{name} {n:,}" for name, n in ds["boxes_per_class"].items()))
    searched = (f"{cov['boxes']:,} boxes" if cov["boxes"] == cov["total_boxes"]
                else f"a sample of {cov['boxes']:,} of {cov['total_boxes']:,} boxes")
    rule = (f"IoU >= {cov['threshold']:g} (model.matcher.matched_threshold)"
            if matcher["name"] == "argmax" else f"IoU >= {cov['threshold']:g} (bipartite "
            "matcher: every box gets one anchor; 0.5 shown as a yardstick)")
    lines.append(f"anchor coverage at the input size, {searched}, {rule}:")
    if cov["boxes"] == 0:
        lines.append("  no boxes to compare")
        return lines
    pct = 100 * cov["unmatched_fraction"]
    line = f"  {cov['unmatched']:,} boxes ({pct:.1f}%) have no anchor at that IoU"
    if cov["unmatched_size_px"]:
        lo, hi = cov["unmatched_size_px"]
        sizes = f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"
        line += f"; sizes {sizes} px at the input"
    lines.append(line)
    lines.append(f"  median best IoU {cov['median_best_iou']:.2f}"
                 + ("; force_match_for_each_row gives each unmatched box its best anchor "
                    "anyway" if matcher["force_match_for_each_row"] and cov["unmatched"] else ""))
    lines += [f"  -> {advice}" for advice in fit["advice"]]
    return lines



def _pct(part: float | None, total: float | None) -> str:
    return f"({100 * part / total:.1f}%)" if part is not None and total else ""


def _gflops(value: float) -> str:
    """``180.2 G``, ``2.50 G``, ``79.7 M``."""
    g = value / 1e9
    if g >= 1:
        return f"{g:,.1f} G" if g >= 100 else f"{g:.2f} G"
    return f"{value / 1e6:,.1f} M"


def _table(rows: list[list[str]], right: set[int], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


PRECISION_SHOWN = {"bf16_on_tpu": "fp32; bf16 to train on a TPU"}


def format_summary(d: dict) -> str:
    """The summary dict of :func:`model_summary` as aligned human-readable text."""
    h, w = d["input_size"]
    background = d["num_class_outputs"] - d["num_classes"]
    lines = [
        f"{d['config']}: {d['description']}",
        f"input {h} x {w} x 3 ({PRECISION_SHOWN.get(d['precision'], d['precision'])}); "
        f"{d['num_classes']} classes"
        + (f" + {background} background" if background else "")
        + f" -> {d['num_class_outputs']} logits per anchor",
        "",
        "parameters",
    ]
    p, total = d["parameters"], d["parameters"]["total"]
    rows = []
    for name, count in p["components"].items():
        if name == "neck" and count == 0:
            continue
        rows.append([name, f"{count:,}", _pct(count, total)])
        if name == "head":
            for branch, n in p["head_branches"].items():
                if n:
                    label = "shared tower" if branch == "shared" else f"{branch} branch"
                    rows.append([f"  {label}", f"{n:,}", _pct(n, total)])
    rows.append(["total", f"{total:,}", ""])
    stats = d["batch_norm_statistics"]
    rows.append(["batch-norm statistics", f"{stats['total']:,}", ""])
    lines += _table(rows, right={1, 2})
    lines.append("  (batch-norm statistics are running means/variances, not trained)")

    a, o = d["anchors"], d["outputs"]
    lines += ["", f"anchors and outputs ({len(a['levels'])} levels)"]
    rows = [["level", "feature map", "anchors/loc", "sizes px", "ratios w/h", "anchors",
             "class logits", "box encodings"]]
    for lvl, out in zip(a["levels"], o["levels"], strict=True):
        fh, fw = lvl["feature_map"]
        rows.append([f"P{lvl['level']}", f"{fh} x {fw}", str(lvl["anchors_per_location"]),
                     ", ".join(f"{v:.0f}" if v >= 100 else f"{v:g}"
                               for v in lvl.get("anchor_sizes_px", [])),
                     ", ".join(f"{v:g}" for v in lvl.get("aspect_ratios", [])),
                     f"{lvl['anchors']:,}", str(out["class_logits"]), str(out["box_encodings"])])
    rows.append(["total", "", "", "", "", f"{a['total']:,}", str(o["class_logits"]),
                 str(o["box_encodings"])])
    lines += _table(rows, right={2, 5})
    lines.append("  (sizes: sqrt(h*w) of each anchor shape in input pixels)")
    if d.get("data"):
        lines += ["", *format_data_fit(d["data"])]
    elif d.get("data_skipped"):
        lines += ["", f"(dataset analysis skipped: {d['data_skipped']})"]

    m = d.get("multiply_adds")
    if m:
        lines += ["", f"multiply-adds {_gflops(m['total'])} (convolutions and matmuls, full "
                  "kernel taps: the papers' 'FLOPs')"]
        rows = [[name, _gflops(v), _pct(v, m["total"])] for name, v in m["components"].items()]
        lines += _table(rows, right={1, 2})

    f = d.get("flops")
    lines.append("")
    if not f or f["total"] is None:
        lines.append("FLOPs: not computed")
    else:
        lines.append(f"FLOPs {_gflops(f['total'])} ({f['method']}, {f['backend']})")
        rows = [[name, _gflops(v), _pct(v, f["total"])]
                for name, v in f["components"].items() if v is not None]
        lines += _table(rows, right={1, 2})
        lines.append("  (components compiled one by one; conv taps on zero padding not counted)")
    return "\n".join(lines)


__all__ = ["FLOPS_METHOD", "data_fit", "format_data_fit", "format_summary", "head_branch",
           "model_summary"]
