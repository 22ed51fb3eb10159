"""Build a CenterNet task from a ``model.type: center_net`` config."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.core.precision import compute_dtype
from jaxdet.data import build as data_build
from jaxdet.models import build as model_build
from jaxdet.models import remat
from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.inspect import abstract_call, module_macs
from jaxdet.tasks.center_net.deepmac import DeepMACHead, MaskNetwork
from jaxdet.tasks.center_net.deepmac_ops import mask_input_channels
from jaxdet.tasks.center_net.keypoints import KeypointTask
from jaxdet.tasks.center_net.model import CenterNet
from jaxdet.tasks.center_net.neck_deconv import CenterNetDeconv
from jaxdet.tasks.center_net.neck_fpn import CenterNetFPN
from jaxdet.tasks.center_net.task import CenterNetTask

REMAT_TARGETS = tuple(t for t in remat.REMAT_TARGETS if t != "head")


def build_center_net_neck(cfg: S.CenterNetModelConfig, in_channels: dict[int, int], *, dtype,
                          rngs: nnx.Rngs) -> nnx.Module:
    """The neck of ``cfg.neck``: CenterNet's upsampling FPN (ResNet / MobileNetV2 extractors)
    or deconvolutions, with their own batch norm (TF: Keras' defaults), or a shared neck
    (``models.build.build_neck``: the identity of an Hourglass)."""
    n = cfg.neck
    if isinstance(n, S.CenterNetFPNConfig):
        return CenterNetFPN(in_channels, tuple(n.filters), batch_norm=model_build.batch_norm_params(
            n.batch_norm), dtype=dtype, rngs=rngs)
    if isinstance(n, S.CenterNetMobileNetV2FPNConfig):
        return CenterNetFPN(in_channels, tuple(n.filters),
                            batch_norm=model_build.batch_norm_params(n.batch_norm),
                            separable=n.use_separable_conv,
                            interpolation=n.upsampling_interpolation, dtype=dtype, rngs=rngs)
    if isinstance(n, S.CenterNetDeconvConfig):
        return CenterNetDeconv(in_channels, tuple(n.filters),
                               batch_norm=model_build.batch_norm_params(n.batch_norm),
                               dtype=dtype, rngs=rngs)
    return model_build.build_neck(cfg, in_channels, dtype=dtype, rngs=rngs)


def build_center_net(config: S.Config, *, seed: int) -> CenterNet:
    """The network: backbone and neck from the shared builders, CenterNet's heads on the
    ``feature_level`` map; with ``mask_head`` DeepMAC's embedding heads and mask network."""
    m = config.model
    dtype = compute_dtype(config.precision)
    rngs = model_rngs(seed)
    backbone = model_build.build_backbone(m, dtype=dtype, rngs=rngs)
    neck = build_center_net_neck(m, dict(backbone.out_channels), dtype=dtype, rngs=rngs)
    keypoint_heads = tuple((len(t.keypoints), t.per_keypoint_offset, t.heatmap_bias_init)
                           for t in m.keypoint_tasks)
    mh, embeddings, mask_net = m.mask_head, None, None
    if mh is not None:
        embeddings = (mh.dim, mh.pixel_embedding_dim, mh.head_depth)
        channels = mask_input_channels(mh.pixel_embedding_dim, mh.dim, use_xy=mh.use_xy,
                                       use_instance_embedding=mh.use_instance_embedding)
        mask_net = MaskNetwork(mh.network_type, channels, mh.num_init_channels,
                               batch_norm=model_build.batch_norm_params(mh.batch_norm),
                               dtype=dtype, rngs=rngs)
    model = CenterNet(backbone, neck, level=m.feature_level,
                      channels=neck.out_channels[m.feature_level], num_classes=m.num_classes,
                      head_depth=m.head_depth, heatmap_bias_init=m.heatmap_bias_init,
                      keypoint_tasks=keypoint_heads, embeddings=embeddings,
                      mask_net=mask_net, dtype=dtype, rngs=rngs)
    _set_remat(model, tuple(config.train.remat))
    model_build.apply_batch_norm_statistics(model, config)
    return model


def _set_remat(model: CenterNet, targets: tuple[str, ...]) -> None:
    """Marks ``train.remat``'s parts (:data:`REMAT_TARGETS`: the backbone, or some of its
    levels, and the neck) for recomputation in the backward pass."""
    if not targets:
        return
    unknown = [t for t in targets if t not in REMAT_TARGETS]
    if unknown:
        raise ValueError(f"train.remat={list(targets)}: CenterNet can recompute "
                         f"{', '.join(REMAT_TARGETS)}; not {', '.join(unknown)}")
    if any(t.startswith("backbone") for t in targets) and not hasattr(model.backbone,
                                                                      "blocks_by_level"):
        raise ValueError(f"train.remat={list(targets)}: the {type(model.backbone).__name__} "
                         "backbone has no remat levels; remat the neck only")
    remat.set_remat(model, targets)


def keypoint_tasks(m: S.CenterNetModelConfig) -> tuple[KeypointTask, ...]:
    """The configured keypoint tasks with their slots laid end to end (the order of the
    dataset's ``data.keypoints.KeypointLayout``)."""
    tasks, offset = [], 0
    for t in m.keypoint_tasks:
        k = len(t.keypoints)
        tasks.append(KeypointTask(
            name=t.name, slots=tuple(range(offset, offset + k)),
            std_dev=tuple(t.std_dev) if t.std_dev is not None else (1.0,) * k,
            class_name=t.class_name,
            oks_sigmas=tuple(t.oks_sigmas) if t.oks_sigmas is not None else (0.05,) * k,
            heatmap_weight=t.heatmap_weight, offset_weight=t.offset_weight,
            regression_weight=t.regression_weight, offset_peak_radius=t.offset_peak_radius,
            per_keypoint_offset=t.per_keypoint_offset,
            candidate_score_threshold=t.candidate_score_threshold,
            num_candidates=t.num_candidates, peak_kernel=t.peak_kernel,
            unmatched_keypoint_score=t.unmatched_keypoint_score, box_scale=t.box_scale,
            candidate_search_scale=t.candidate_search_scale,
            candidate_ranking_mode=t.candidate_ranking_mode,
            score_distance_offset=t.score_distance_offset))
        offset += k
    return tuple(tasks)


def mask_head(config: S.Config) -> DeepMACHead | None:
    """The configured DeepMAC mask part (None without ``model.mask_head``); refuses a mask
    head without ``data.load_masks`` and allowed classes outside the model's."""
    mh = config.model.mask_head
    if mh is None:
        return None
    if not config.data.load_masks:
        raise ValueError("model.mask_head (DeepMAC) needs data.load_masks: true (the mask "
                         "loss reads the ground-truth instance masks)")
    outside = [c for c in mh.allowed_masked_classes if c >= config.model.num_classes]
    if outside:
        raise ValueError(f"model.mask_head.allowed_masked_classes: {outside} are not classes "
                         f"of the model (0-based, below num_classes {config.model.num_classes})")
    return DeepMACHead(mask_size=mh.mask_size, use_xy=mh.use_xy,
                       use_instance_embedding=mh.use_instance_embedding,
                       allowed_classes=tuple(mh.allowed_masked_classes),
                       task_loss_weight=mh.task_loss_weight)


def build_center_net_task(config: S.Config, *, seed: int) -> CenterNetTask:
    """The network (:func:`build_center_net`) and its task."""
    m = config.model
    loss, post = m.loss, m.post_processing
    kp_tasks = keypoint_tasks(m)
    masks = mask_head(config)
    return CenterNetTask(
        model=build_center_net(config, seed=seed), input_size=data_build.input_size(config.data),
        stride=2**m.feature_level, num_classes=m.num_classes,
        max_boxes=config.data.max_number_of_boxes, max_detections=post.max_detections,
        min_overlap=m.min_overlap, alpha=loss.alpha, beta=loss.beta,
        heatmap_weight=loss.heatmap_weight, size_weight=loss.size_weight,
        offset_weight=loss.offset_weight, peak_kernel=post.peak_kernel,
        compute_dtype=compute_dtype(config.precision), seed=seed,
        remat_targets=REMAT_TARGETS,
        keypoint_tasks=kp_tasks, num_keypoints=sum(t.num_keypoints for t in kp_tasks),
        mask_head=masks, mask_shape=data_build.mask_shape(config) if masks else None)


def center_net_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """The network (backbone, FPN, level, heads, classes, the keypoint tasks' heads, the mask
    head's network) and the input size."""
    dumped = fingerprint_dump(config.model)
    keep = ("type", "num_classes", "backbone", "neck", "feature_level", "head_depth")
    fields = {"model": {k: dumped[k] for k in keep},
              "input_size": list(data_build.input_size(config.data))}
    if config.model.keypoint_tasks:
        fields["model"]["keypoint_tasks"] = [
            {"name": t.name, "keypoints": list(t.keypoints),
             "per_keypoint_offset": t.per_keypoint_offset}
            for t in config.model.keypoint_tasks]
    if config.model.mask_head is not None:  # what shapes the embedding heads and mask network
        fields["model"]["mask_head"] = {k: dumped["mask_head"][k] for k in (
            "dim", "pixel_embedding_dim", "use_xy", "use_instance_embedding", "network_type",
            "num_init_channels", "head_depth")}
    return fields


def center_net_summary(config: S.Config, *, flops: bool = True, **_: Any) -> dict:
    """``jaxdet summary`` for CenterNet: parameters per part, the output maps and, unless
    ``flops`` is False (``--no-flops``: no ``multiply_adds`` entries, which cost a trace of
    the whole network), the multiply-adds of one image (backbone, neck, heads; from the jaxpr,
    ``jaxdet.models.inspect``). The model is built abstractly: no weights are computed."""

    model = abstract_build(lambda: build_center_net(config, seed=0))
    stride = 2**config.model.feature_level
    height, width = data_build.input_size(config.data)

    def count(module) -> int:
        return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    h, w = height // stride, width // stride
    c = config.model.num_classes
    model.eval()
    images = jax.ShapeDtypeStruct((1, height, width, 3), compute_dtype(config.precision))
    if flops:
        total_macs = module_macs(model, images)
        backbone_macs = module_macs(model.backbone, images)
        neck_macs = (module_macs(model.neck, abstract_call(model.backbone, images))
                     if model.neck is not None and not hasattr(model, "intermediate_heads")
                     else 0)
    head_sets = [model, *getattr(model, "intermediate_heads", ())]
    keypoint_heads = sum(count(h.keypoint_heads) for h in head_sets
                         if hasattr(h, "keypoint_heads"))
    extractor = count(model.backbone) + (count(model.neck) if model.neck is not None else 0)
    mask_net = count(model.mask_net) if hasattr(model, "mask_net") else 0
    parameters = {"backbone": count(model.backbone), "neck": count(model.neck),
                  "heads": count(model) - extractor - mask_net, "head_sets": len(head_sets),
                  "keypoint_heads": keypoint_heads, "total": count(model)}
    deepmac = {}
    if mask_net:
        parameters["embedding_heads"] = sum(count(h.instance_embedding)
                                            + count(h.pixel_embedding) for h in head_sets)
        parameters["mask_net"] = mask_net
        mh = config.model.mask_head
        size, channels = mh.mask_size, model.mask_net.net.stem.conv.in_features
        box = jax.ShapeDtypeStruct((1, size, size, channels), images.dtype)
        deepmac = {"mask_head": {"network_type": mh.network_type, "mask_size": size,
                                 "input_channels": channels}}
        if flops:
            deepmac["mask_head"]["multiply_adds_per_box"] = module_macs(model.mask_net, box)
    macs = {"multiply_adds": {"total": total_macs, "components": {
        "backbone": backbone_macs, "neck": neck_macs,
        "heads": total_macs - backbone_macs - neck_macs}}} if flops else {}
    return {
        "name": config.name, "type": "center_net", "input_size": [height, width],
        "num_classes": c, "parameters": parameters, **deepmac, **macs,
        "keypoint_tasks": [{"name": t.name, "class_name": t.class_name,
                            "keypoints": len(t.keypoints)}
                           for t in config.model.keypoint_tasks],
        "outputs": {"stride": stride, "heatmap": [h, w, c], "size": [h, w, 2],
                    "offset": [h, w, 2],
                    "max_detections": config.model.post_processing.max_detections},
    }


def format_center_net_summary(d: dict) -> str:
    p, o = d["parameters"], d["outputs"]
    tasks = d.get("keypoint_tasks") or []
    kp = (f", of which keypoint heads {p['keypoint_heads']:,}" if tasks else "")
    if p.get("head_sets", 1) > 1:
        kp += f"; one set of heads on each of the {p['head_sets']} stacks"
    if "mask_net" in p:
        kp += f"; mask network {p['mask_net']:,}"
    lines = [
        f"{d['name'] or 'config'}: CenterNet, {d['num_classes']} classes, input "
        f"{d['input_size'][0]}x{d['input_size'][1]}",
        f"parameters: {p['total']:,} (backbone {p['backbone']:,}, neck {p['neck']:,}, heads "
        f"{p['heads']:,}{kp})",
        *([] if "multiply_adds" not in d else [
            f"multiply-adds per image: {d['multiply_adds']['total'] / 1e9:.2f} G (backbone "
            f"{d['multiply_adds']['components']['backbone'] / 1e9:.2f} G, neck "
            f"{d['multiply_adds']['components']['neck'] / 1e9:.2f} G, heads "
            f"{d['multiply_adds']['components']['heads'] / 1e9:.2f} G)"]),
        f"outputs at stride {o['stride']}: heatmap {'x'.join(map(str, o['heatmap']))}, size and "
        f"offset {'x'.join(map(str, o['size']))}; the best {o['max_detections']} peaks per image",
    ]
    for t in tasks:
        lines.append(f"keypoint task {t['name']!r}: {t['keypoints']} keypoints of class "
                     f"{t['class_name']!r}")
    if "mask_head" in d:
        mh = d["mask_head"]
        lines.append(f"DeepMAC masks: embedding heads {p['embedding_heads']:,} (in the heads), "
                     f"mask network {mh['network_type']} on "
                     f"{mh['mask_size']}x{mh['mask_size']}x{mh['input_channels']} per box"
                     + (f" ({mh['multiply_adds_per_box'] / 1e9:.2f} G multiply-adds)"
                        if "multiply_adds_per_box" in mh else "") + "; one "
                     f"{mh['mask_size']}x{mh['mask_size']} mask per detection")
    return "\n".join(lines)
