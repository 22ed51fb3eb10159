"""Build a CenterNet task from a ``model.type: center_net`` config."""

from __future__ import annotations

from typing import Any

from flax import nnx

from jaxdet import builders
from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.tasks.center_net.model import CenterNet
from jaxdet.tasks.center_net.task import CenterNetTask


def build_center_net(config: S.Config, *, seed: int) -> CenterNet:
    """The network: backbone and neck from the shared builders, CenterNet's heads on the
    ``feature_level`` map."""
    m = config.model
    if config.train.remat:
        raise ValueError(f"train.remat={list(config.train.remat)}: CenterNet has no remat "
                         "parts yet; remove train.remat")
    dtype = builders.COMPUTE_DTYPES[config.precision]
    rngs = nnx.Rngs(seed)
    backbone = builders.build_backbone(m, dtype=dtype, rngs=rngs)
    neck = builders.build_neck(m, dict(backbone.out_channels), dtype=dtype, rngs=rngs)
    model = CenterNet(backbone, neck, level=m.feature_level,
                      channels=neck.out_channels[m.feature_level], num_classes=m.num_classes,
                      head_depth=m.head_depth, heatmap_bias_init=m.heatmap_bias_init,
                      dtype=dtype, rngs=rngs)
    builders.apply_batch_norm_statistics(model, config)
    return model


def build_center_net_task(config: S.Config, *, seed: int) -> CenterNetTask:
    """The network (:func:`build_center_net`) and its task."""
    m = config.model
    loss, post = m.loss, m.post_processing
    return CenterNetTask(
        model=build_center_net(config, seed=seed), input_size=builders.input_size(config.data),
        stride=2**m.feature_level, num_classes=m.num_classes,
        max_boxes=config.data.max_number_of_boxes, max_detections=post.max_detections,
        min_overlap=m.min_overlap, alpha=loss.alpha, beta=loss.beta,
        heatmap_weight=loss.heatmap_weight, size_weight=loss.size_weight,
        offset_weight=loss.offset_weight, peak_kernel=post.peak_kernel,
        compute_dtype=builders.COMPUTE_DTYPES[config.precision], seed=seed)


def center_net_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """The network (backbone, FPN, level, heads, classes) and the input size."""
    dumped = fingerprint_dump(config.model)
    keep = ("type", "num_classes", "backbone", "neck", "feature_level", "head_depth")
    return {"model": {k: dumped[k] for k in keep},
            "input_size": list(builders.input_size(config.data))}


def center_net_summary(config: S.Config, **_: Any) -> dict:
    """``jaxdet summary`` for CenterNet: parameters per part and the output maps (the model
    is built abstractly: no weights are computed)."""
    model = nnx.eval_shape(lambda: build_center_net(config, seed=0))
    stride = 2**config.model.feature_level
    height, width = builders.input_size(config.data)

    def count(module) -> int:
        return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    h, w = height // stride, width // stride
    c = config.model.num_classes
    return {
        "name": config.name, "type": "center_net", "input_size": [height, width],
        "num_classes": c,
        "parameters": {"backbone": count(model.backbone), "neck": count(model.neck),
                       "heads": sum(count(getattr(model, n)) for n in ("heatmap", "size",
                                                                        "offset")),
                       "total": count(model)},
        "outputs": {"stride": stride, "heatmap": [h, w, c], "size": [h, w, 2],
                    "offset": [h, w, 2],
                    "max_detections": config.model.post_processing.max_detections},
    }


def format_center_net_summary(d: dict) -> str:
    p, o = d["parameters"], d["outputs"]
    return "\n".join([
        f"{d['name'] or 'config'}: CenterNet, {d['num_classes']} classes, input "
        f"{d['input_size'][0]}x{d['input_size'][1]}",
        f"parameters: {p['total']:,} (backbone {p['backbone']:,}, neck {p['neck']:,}, heads "
        f"{p['heads']:,})",
        f"outputs at stride {o['stride']}: heatmap {'x'.join(map(str, o['heatmap']))}, size and "
        f"offset {'x'.join(map(str, o['size']))}; the best {o['max_detections']} peaks per image",
    ])
