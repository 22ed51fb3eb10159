"""Run an exported artifact in its own runtime, and compare it with ``jaxdet predict``.

    run = load_artifact("exported/")          # reads signature.json for the format
    outputs = run(images)                     # uint8 [B, H, W, 3] -> the signature's dict

The runtimes are imported only for the format asked for: jax (StableHLO), ``onnxruntime``,
``tensorflow`` (SavedModel) and ``ai_edge_litert`` (TFLite, the runtime devices ship).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

Outputs = dict[str, np.ndarray]


def load_artifact(out_dir: str | Path) -> Callable[[np.ndarray], Outputs]:
    """``run(inputs) -> {output name: array}`` for the artifact in ``out_dir`` (a
    ``jaxdet export`` folder); ``inputs`` as its signature.json says (images, or encoded
    strings for an ``encoded_image_string_tensor`` SavedModel)."""
    out_dir = Path(out_dir)
    signature = json.loads((out_dir / "signature.json").read_text())
    fmt, name = signature["format"], signature["input"]["name"]
    if fmt == "stablehlo":
        import jax

        call = jax.jit(jax.export.deserialize((out_dir / "model.stablehlo").read_bytes()).call)
        return lambda x: {k: np.asarray(v) for k, v in call(x).items()}
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(out_dir / "model.onnx"),
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda x: dict(zip(names, session.run(None, {name: x}), strict=True))
    if fmt in ("saved_model", "tflite_saved_model"):
        import tensorflow as tf

        serve = tf.saved_model.load(str(out_dir / "saved_model")).signatures["serving_default"]
        return lambda x: {k: v.numpy() for k, v in serve(**{name: tf.constant(x)}).items()}
    if fmt == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        runner = Interpreter(model_path=str(out_dir / "model.tflite")).get_signature_runner(
            "serving_default")
        return lambda x: runner(**{name: x})
    raise ValueError(f"{out_dir}/signature.json: unknown format {fmt!r}")


def predict_as_signature(det: dict, size: tuple[int, int], class_ids: np.ndarray,
                         slot_mask: np.ndarray | None = None) -> Outputs:
    """``task.predict``'s detections (pixels of the ``size`` (H, W) input, class indices) in
    the exporter's signature: boxes / keypoints normalized, classes as label ids, keypoints
    zeroed outside the class's slots (``slot_mask`` [C, K]), masks (box-relative) as they
    are."""
    h, w = size
    out = {"num_detections": np.asarray(det["num_detections"], np.float32),
           "detection_classes": np.asarray(class_ids)[det["classes"]].astype(np.float32),
           "detection_scores": np.asarray(det["scores"], np.float32),
           "detection_boxes": np.asarray(det["boxes"]) / [h, w, h, w]}
    if "keypoints" in det and slot_mask is not None:
        slots = slot_mask[det["classes"]]
        out["detection_keypoints"] = np.asarray(det["keypoints"]) / [h, w] * slots[..., None]
        out["detection_keypoint_scores"] = np.asarray(det["keypoint_scores"]) * slots
    if "masks" in det:
        out["detection_masks"] = np.asarray(det["masks"], np.float32)
    return out


def _gaps(got: Outputs, want: Outputs, i: int, d: int, free: list[int]) -> dict[int, dict]:
    """For expected detection ``d`` of image ``i``: each unused detection ``j`` in ``free`` of
    the same class -> {output: largest absolute difference} (classes and counts left out)."""
    keys = [k for k in want if k not in ("num_detections", "detection_classes")]
    return {j: {k: float(np.max(np.abs(np.asarray(got[k][i, j]) - want[k][i, d])))
                for k in keys}
            for j in free if got["detection_classes"][i, j] == want["detection_classes"][i, d]}


def _match(got: Outputs, want: Outputs, i: int) -> tuple[bool, dict[str, float]]:
    """Pairs image ``i``'s detections one to one: each expected one with the closest unused
    detection of the same class (runtimes may order detections of equal score differently).
    Returns (every expected detection found a partner, {output: largest difference})."""
    free = list(range(int(got["num_detections"][i])))
    worst: dict[str, float] = {}
    for d in range(int(want["num_detections"][i])):
        gaps = _gaps(got, want, i, d, free)
        if not gaps:
            return False, worst
        best = min(gaps, key=lambda j: max(gaps[j].values()))
        free.remove(best)
        for k, v in gaps[best].items():
            worst[k] = max(worst.get(k, 0.0), v)
    return True, worst


def differences(got: Outputs, want: Outputs) -> dict:
    """How far an artifact's outputs are from the expected ones: ``{"num_detections_equal",
    "classes_equal": bool, "max_abs": {output: float}}``, each expected detection paired with
    the closest one of its class in ``got`` (see :func:`_match`)."""
    same_count = bool(np.array_equal(got["num_detections"], want["num_detections"]))
    result = {"num_detections_equal": same_count, "classes_equal": same_count, "max_abs": {}}
    if not same_count:
        return result
    for i in range(len(want["num_detections"])):
        matched, worst = _match(got, want, i)
        result["classes_equal"] &= matched
        for k, v in worst.items():
            result["max_abs"][k] = max(result["max_abs"].get(k, 0.0), v)
    return result


def _pair_within(got: Outputs, want: Outputs, i: int, atol: float) -> tuple[list, list, float]:
    """Image ``i``'s detections paired one to one where they agree: same class and every
    other output within ``atol``, the closest such partner taken. Returns (unpaired expected
    indices, unpaired ``got`` indices, largest difference over the pairs)."""
    free = list(range(int(got["num_detections"][i])))
    missing, worst = [], 0.0
    for d in range(int(want["num_detections"][i])):
        close = {j: max(g.values()) for j, g in _gaps(got, want, i, d, free).items()}
        close = {j: g for j, g in close.items() if g <= atol}
        if not close:
            missing.append(d)
            continue
        j = min(close, key=close.get)
        free.remove(j)
        worst = max(worst, close[j])
    return missing, free, worst


def near_tie_differences(got: Outputs, want: Outputs, atol: float = 1e-4,
                         max_swap_fraction: float = 0.05) -> dict:
    """Tells near-tie swaps from real differences. Two runtimes whose scores differ by their
    rounding (1e-6) may keep different detections where candidates' scores lie closer than
    that: NMS picks the other of two overlapping boxes, or another candidate takes the last
    of the ``max_detections`` places. Such a swap leaves the per-image score lists equal.

    Returns ``{"swaps": int, "sorted_scores_max_abs": float, "paired_max_abs": float, "ok":
    bool}``: detections paired where class and every output agree within ``atol``; the rest
    counted as swaps; ``ok`` when counts are equal, every image's scores sorted descending
    are equal within ``atol`` rank by rank, and so are the unpaired detections' scores (each
    swapped-out detection has a swapped-in one of the same score), and at most
    ``max_swap_fraction`` of the detections are swapped (a wrong box decoding or class map
    would unpair nearly all of them)."""
    result = {"swaps": 0, "sorted_scores_max_abs": 0.0, "paired_max_abs": 0.0,
              "ok": bool(np.array_equal(got["num_detections"], want["num_detections"]))}
    if not result["ok"]:
        return result
    for i in range(len(want["num_detections"])):
        n = int(want["num_detections"][i])
        ranked = [np.sort(np.asarray(o["detection_scores"][i, :n]))[::-1] for o in (got, want)]
        missing, extra, worst = _pair_within(got, want, i, atol)
        swapped = [np.sort(np.asarray(o["detection_scores"][i, idx]))
                   for o, idx in ((want, missing), (got, extra))]
        gap = float(np.max(np.abs(ranked[0] - ranked[1]), initial=0.0))
        swap_gap = float(np.max(np.abs(swapped[0] - swapped[1]), initial=0.0))
        result["swaps"] += len(missing)
        result["sorted_scores_max_abs"] = max(result["sorted_scores_max_abs"], gap, swap_gap)
        result["paired_max_abs"] = max(result["paired_max_abs"], worst)
    total = max(int(np.sum(want["num_detections"])), 1)
    result["ok"] = (result["sorted_scores_max_abs"] <= atol
                    and result["swaps"] <= max_swap_fraction * total)
    return result


def assert_same_detections(got: Outputs, want: Outputs, atol: float = 1e-4) -> None:
    """Raises AssertionError unless ``got`` has ``want``'s detection count and classes, and
    every other output within ``atol``."""
    d = differences(got, want)
    assert d["num_detections_equal"], (got["num_detections"], want["num_detections"])
    assert d["classes_equal"], "different classes"
    far = {k: v for k, v in d["max_abs"].items() if not v <= atol}
    assert not far, f"outputs beyond {atol}: {far}"


__all__ = ["assert_same_detections", "differences", "load_artifact", "near_tie_differences",
           "predict_as_signature"]
