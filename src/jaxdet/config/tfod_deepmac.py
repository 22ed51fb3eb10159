"""pipeline.config ``center_net { deepmac_mask_estimation {...} }`` (the TF OD API's DeepMAC,
``DeepMACMetaArch``) -> jaxdet's ``model.mask_head``.

Called by ``config/tfod_center_net.py``. TF's defaults are ``center_net.proto``'s
``DeepMACMaskEstimation``. Mapped: the embedding sizes, ``mask_size``, ``use_xy``,
``use_instance_embedding``, the hourglass ``network_type`` and ``num_init_channels``,
``task_loss_weight``, ``allowed_masked_classes_ids`` (label-map ids -> jaxdet's 0-based class
indices, id - 1) and ``postprocess_crop_size``; the loss must be ``weighted_sigmoid``. Every
other field (the weakly supervised losses, box jitter, subsampling, full-resolution masks,
other mask networks) is accepted only at TF's default, else one line names it.
"""

from __future__ import annotations

from typing import Any

from jaxdet.config.pbtxt import EnumValue, Message
from jaxdet.config.schema_deepmac import MASK_NETWORK_STAGES
from jaxdet.config.tfod_common import Mapper

# DeepMACMaskEstimation fields jaxdet supports only at TF's default (the proto's defaults)
DEFAULT_ONLY: dict[str, Any] = {
    "mask_num_subsamples": -1,
    "predict_full_resolution_masks": False,
    "max_roi_jitter_ratio": 0.0,
    "jitter_mode": EnumValue("DEFAULT"),
    "box_consistency_loss_weight": 0.0,
    "feature_consistency_threshold": 0.4,
    "feature_consistency_dilation": 2,
    "feature_consistency_loss_weight": 0.0,
    "box_consistency_loss_normalize": EnumValue("NORMALIZE_AUTO"),
    "box_consistency_tightness": False,
    "feature_consistency_warmup_steps": 0,
    "feature_consistency_warmup_start": 0,
    "feature_consistency_type": EnumValue("CONSISTENCY_DEFAULT_LAB"),
    "feature_consistency_comparison": EnumValue("COMPARISON_DEFAULT_GAUSSIAN"),
    "use_only_last_stage": False,
    "augmented_self_supervision_max_translation": 0.0,
    "augmented_self_supervision_flip_probability": 0.0,
    "augmented_self_supervision_loss_weight": 0.0,
    "augmented_self_supervision_warmup_start": 0,
    "augmented_self_supervision_warmup_steps": 0,
    "augmented_self_supervision_loss": EnumValue("LOSS_DICE"),
    "augmented_self_supervision_scale_min": 1.0,
    "augmented_self_supervision_scale_max": 1.0,
    "pointly_supervised_keypoint_loss_weight": 0.0,
    "ignore_per_class_box_overlap": False,
}


def map_deepmac(m: Mapper, dm: Message, num_classes: int) -> dict[str, Any]:
    """``deepmac_mask_estimation {...}`` -> jaxdet's ``model.mask_head`` (a dict)."""
    _, loss = m.choice(dm, "classification_loss", ["weighted_sigmoid"])
    m.only(loss, "anchorwise_output", [False], False)
    for name, default in DEFAULT_ONLY.items():
        m.only(dm, name, [default], default)
    ids = [int(v) for v in dm.all("allowed_masked_classes_ids")]
    outside = [i for i in ids if not 1 <= i <= num_classes]
    if outside and len(outside) == len(ids):  # TF would train no mask at all
        raise m.error(dm, "allowed_masked_classes_ids", f"{outside} are not label-map ids of "
                      f"the model's classes (1..{num_classes}): no class would train its masks")
    if outside:  # a zoo list kept in a config edited down to fewer classes: TF matches none
        m.warn(f"{dm.path}.allowed_masked_classes_ids: {outside} are not label-map ids of the "
               f"model's classes (1..{num_classes}); TF matches no box to them, nor does jaxdet")
        ids = [i for i in ids if 1 <= i <= num_classes]
    return {
        "dim": int(dm.take("dim", 256)),
        "pixel_embedding_dim": int(dm.take("pixel_embedding_dim", 16)),
        "mask_size": int(dm.take("mask_size", 32)),
        "use_xy": bool(dm.take("use_xy", True)),
        "use_instance_embedding": bool(dm.take("use_instance_embedding", True)),
        "network_type": str(m.only(dm, "network_type", list(MASK_NETWORK_STAGES),
                                   "hourglass52")),
        "num_init_channels": int(dm.take("num_init_channels", 64)),
        "task_loss_weight": float(dm.take("task_loss_weight", 1.0)),
        "allowed_masked_classes": sorted({i - 1 for i in ids}),
        "postprocess_crop_size": int(dm.take("postprocess_crop_size", 256)),
    }


__all__ = ["DEFAULT_ONLY", "map_deepmac"]
