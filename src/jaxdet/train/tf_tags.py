"""The TF OD API's TensorBoard tags for jaxdet's metrics, so that a dashboard built on a TF
``model_dir`` shows a jaxdet run unchanged.

TF's ``model_main_tf2.py`` writes training scalars to ``model_dir/train`` (``Loss/...``,
``learning_rate``, ``steps_per_sec``) and evaluation scalars to ``model_dir/eval``
(``DetectionBoxes_Precision/mAP``, ..., ``PascalBoxes_Precision/mAP@0.5IOU``, ...).
:func:`tf_tag` names a jaxdet metric (``train/loss``, ``eval/AP``) as TF does, and says which
of the two runs it belongs to.

    run, tag = tf_tag("eval/AP50")   # ("eval", "DetectionBoxes_Precision/mAP@.50IOU")
"""

from __future__ import annotations

# jaxdet's training metric -> TF's tag, where the two mean the same number. The total is
# the optimized loss plus the regularization (TF's ``Loss/total_loss``): see :func:`tf_scalars`.
TRAIN_TAGS = {
    "classification_loss": "Loss/classification_loss",
    "localization_loss": "Loss/localization_loss",
    "regularization_loss": "Loss/regularization_loss",
    "total_loss": "Loss/total_loss",
    "learning_rate": "learning_rate",
}
# jaxdet's COCO statistics -> TF's names after ``DetectionBoxes_`` / ``DetectionMasks_``
COCO_TAGS = {
    "AP": "Precision/mAP", "AP50": "Precision/mAP@.50IOU", "AP75": "Precision/mAP@.75IOU",
    "APs": "Precision/mAP (small)", "APm": "Precision/mAP (medium)",
    "APl": "Precision/mAP (large)", "AR1": "Recall/AR@1", "AR10": "Recall/AR@10",
    "AR100": "Recall/AR@100", "ARs": "Recall/AR@100 (small)", "ARm": "Recall/AR@100 (medium)",
    "ARl": "Recall/AR@100 (large)",
}


def tf_tag(name: str) -> tuple[str, str]:
    """``(run, tag)`` of jaxdet metric ``name`` (``train/...`` or ``eval/...``) as TF writes
    it: run ``train`` or ``eval``; metrics TF has no name for keep theirs, less the prefix
    (``train/grad_norm`` -> ``("train", "grad_norm")``)."""
    run, _, metric = name.partition("/")
    if run == "train":
        return "train", TRAIN_TAGS.get(metric, metric)
    if run == "eval":
        if metric in COCO_TAGS:
            return "eval", "DetectionBoxes_" + COCO_TAGS[metric]
        if metric.startswith("segm/") and metric[5:] in COCO_TAGS:
            return "eval", "DetectionMasks_" + COCO_TAGS[metric[5:]]
        return "eval", metric  # PascalBoxes_... are TF's own names already
    return "train", name


def tf_scalars(values: dict[str, float], *, batch_size: int | None = None) -> dict[str, float]:
    """``values`` (jaxdet's, e.g. ``{"train/loss": ..., "eval/AP": ...}``) with what TF
    writes besides: ``train/total_loss`` (the loss plus ``regularization_loss``: TF's
    ``Loss/total_loss``) and ``train/steps_per_sec`` (``images_per_second / batch_size``)."""
    out = dict(values)
    if "train/loss" in values:
        out["train/total_loss"] = values["train/loss"] + values.get("train/regularization_loss",
                                                                   0.0)
    if batch_size and "train/images_per_second" in values:
        out["train/steps_per_sec"] = values["train/images_per_second"] / batch_size
    return out


__all__ = ["COCO_TAGS", "TRAIN_TAGS", "tf_scalars", "tf_tag"]
