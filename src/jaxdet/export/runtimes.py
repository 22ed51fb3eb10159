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
    if fmt == "saved_model":
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


def _match(got: Outputs, want: Outputs, i: int) -> tuple[bool, dict[str, float]]:
    """Pairs image ``i``'s detections one to one: each expected one with the closest unused
    detection of the same class (runtimes may order detections of equal score differently).
    Returns (every expected detection found a partner, {output: largest difference})."""
    n = int(want["num_detections"][i])
    keys = [k for k in want if k not in ("num_detections", "detection_classes")]
    free = list(range(int(got["num_detections"][i])))
    worst: dict[str, float] = {}
    for d in range(n):
        same = [j for j in free
                if got["detection_classes"][i, j] == want["detection_classes"][i, d]]
        if not same:
            return False, worst
        gaps = [{k: float(np.max(np.abs(np.asarray(got[k][i, j]) - want[k][i, d])))
                 for k in keys} for j in same]
        best = min(range(len(same)), key=lambda m: max(gaps[m].values()))
        free.remove(same[best])
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


def assert_same_detections(got: Outputs, want: Outputs, atol: float = 1e-4) -> None:
    """Raises AssertionError unless ``got`` has ``want``'s detection count and classes, and
    every other output within ``atol``."""
    d = differences(got, want)
    assert d["num_detections_equal"], (got["num_detections"], want["num_detections"])
    assert d["classes_equal"], "different classes"
    far = {k: v for k, v in d["max_abs"].items() if not v <= atol}
    assert not far, f"outputs beyond {atol}: {far}"


__all__ = ["assert_same_detections", "differences", "load_artifact", "predict_as_signature"]
