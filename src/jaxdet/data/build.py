"""Config -> data objects: input size, resizer, augment ops, sources, train and eval loaders.

Takes config sections, returns plain objects. What depends on the model family (whether the
resizer's padding is normalized with the image) is passed in by the caller, which knows the family.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import jax

from jaxdet.backends import dispatch
from jaxdet.config import schema as S
from jaxdet.config.input_size import input_size
from jaxdet.config.loader import ConfigError
from jaxdet.config.placeholders import check_dataset_paths
from jaxdet.core.precision import compute_dtype
from jaxdet.data import augment, augment_color, augment_crop, resize
from jaxdet.data.batch_layout import BatchLayout
from jaxdet.data.coco import CocoSource
from jaxdet.data.eval_loader import make_eval_loader
from jaxdet.data.keypoints import KeypointSpec
from jaxdet.data.loader import gather_ints, make_train_loader, resolve_worker_count
from jaxdet.data.normalize import PixelNormalizer, transfer_layout
from jaxdet.data.sampling import every_nth
from jaxdet.data.shapes import generate_shapes
from jaxdet.data.tfrecord_source import TfRecordSource
from jaxdet.data.voc import VocSource

log = logging.getLogger("jaxdet")



# --------------------------------------------------------------------------- data


def build_resizer(cfg: S.DataConfig):
    """The resizer; instance masks (``data.load_masks``) leave it on the input size's grid
    divided by ``data.mask_stride``."""
    r = cfg.resizer
    if isinstance(r, S.FixedShapeResizerConfig):
        return resize.FixedShapeResizer(r.height, r.width, r.method, mask_stride=cfg.mask_stride)
    return resize.KeepAspectRatioResizer(r.min_dimension, r.max_dimension, r.pad_to_max_dimension,
                                         r.method, mask_stride=cfg.mask_stride)


def build_augment_op(op: S.AugmentConfig, size: tuple[int, int], method: str = "bilinear"):
    """The augment op of ``op``; ``size``: the resizer's output (height, width); ``method``: the
    resizer's resize method, which an op that scales the image uses too."""
    if isinstance(op, S.RandomHorizontalFlipConfig):
        return augment.RandomHorizontalFlip(probability=op.probability,
                                            keypoint_flip_permutation=op.keypoint_flip_permutation)
    if isinstance(op, S.RandomScaleCropAndPadToSquareConfig):
        if size[0] != size[1]:
            raise ValueError(
                "data.augment random_scale_crop_and_pad_to_square needs a square input size, "
                f"got {size}"
            )
        if op.output_size != size[0]:
            raise ValueError(
                f"data.augment random_scale_crop_and_pad_to_square output_size "
                f"({op.output_size}) must equal the resizer's square size ({size[0]})"
            )
        return augment.RandomScaleCropAndPadToSquare(size[0], op.scale_min, op.scale_max,
                                                     method=method)
    if isinstance(op, S.SSDRandomCropConfig):
        return augment.SSDRandomCrop(
            min_object_covered=tuple(op.min_object_covered),
            aspect_ratio_range=tuple(op.aspect_ratio_range),
            area_range=tuple(op.area_range),
            overlap_thresh=tuple(op.overlap_thresh),
            random_coef=op.random_coef,
        )
    if isinstance(op, S.RandomColorJitterConfig):
        return augment.RandomColorJitter(
            brightness=op.brightness,
            contrast=tuple(op.contrast),
            saturation=tuple(op.saturation),
            hue=op.hue,
            probability=op.probability,
        )
    return _build_tfod_augment_op(op)


# TF OD API ops whose config fields are exactly their constructor's keyword arguments.
_TFOD_AUGMENT_OPS = {
    S.RandomPadImageConfig: augment_crop.RandomPadImage,
    S.RandomAbsolutePadImageConfig: augment_crop.RandomAbsolutePadImage,
    S.RandomCropImageConfig: augment_crop.RandomCropImage,
    S.RandomSquareCropByScaleConfig: augment_crop.RandomSquareCropByScale,
    S.RandomAdjustBrightnessConfig: augment_color.RandomAdjustBrightness,
    S.RandomAdjustContrastConfig: augment_color.RandomAdjustContrast,
    S.RandomAdjustHueConfig: augment_color.RandomAdjustHue,
    S.RandomAdjustSaturationConfig: augment_color.RandomAdjustSaturation,
    S.RandomDistortColorConfig: augment_color.RandomDistortColor,
    S.RandomBlackPatchesConfig: augment_color.RandomBlackPatches,
}


def _build_tfod_augment_op(op: S.AugmentConfig):
    fields = {k: (tuple(v) if isinstance(v, list) else v)
              for k, v in op.model_dump(exclude={"name"}).items()}
    return _TFOD_AUGMENT_OPS[type(op)](**fields)


def build_transforms(cfg: S.DataConfig, *, training: bool, pads_raw_pixels: bool = False,
                     normalize: bool = True) -> list:
    """Per-sample transforms after decode: [augment ops] + resizer + normalize; in training
    with ``data.crowd_boxes: train``, crowd objects are made ordinary ones first
    (``pads_raw_pixels``: the padding is normalized like black pixels, see
    ``augment.Normalize``; a config's family says which).
    ``normalize=False`` stops at the resizer: the loaders do, and the device normalizes
    (:func:`pixel_normalizer`)."""
    resizer = build_resizer(cfg)
    size = resizer.output_size
    if size is None:
        raise ValueError("data.resizer.pad_to_max_dimension must be true: jaxdet needs one "
                         "static input shape")
    ops = ([build_augment_op(op, size, resizer.method) for op in cfg.augment]
           if training else [])
    if training and cfg.crowd_boxes == "train":
        ops.insert(0, augment.TrainCrowdBoxes())
    ops.append(resizer)
    if normalize:
        ops.append(augment.Normalize(mean=tuple(cfg.mean), std=tuple(cfg.std),
                                     zero_padding=not pads_raw_pixels))
    return ops


def pixel_normalizer(config: S.Config, *, pads_raw_pixels: bool) -> PixelNormalizer | None:
    """The device-side normalization of the images the loaders send (``data.normalize``), in
    the dtype the network computes in (the task casts its input to it: the same values), or
    None for data that are not images (the 3D U-Net's volumes). ``pads_raw_pixels``: as in
    :func:`build_transforms` (the caller passes the family's)."""
    if config.data.type != "images":
        return None
    return PixelNormalizer(tuple(config.data.mean), tuple(config.data.std),
                           zero_padding=not pads_raw_pixels,
                           dtype=compute_dtype(config.precision))


def train_batch_layout(config: S.Config, task) -> BatchLayout:
    """The train batch the loader sends for ``task``: its ``batch_layout`` with raw
    ``images`` of ``data.train_image_dtype`` and ``image_info`` (normalized on the device),
    or the task's own layout for data that are not images."""
    layout = task.batch_layout()
    if config.data.type != "images":
        return layout
    return transfer_layout(layout, config.data.train_image_dtype)


def decode_mode(config: S.Config, weights_format: str | None = None) -> str:
    """How JPEGs decode (``data.decode``): ``data.jpeg_decode`` when set; for ``auto``,
    ``tf`` when the job's weights come from a TF checkpoint (``weights_format="tf"``: the job
    knows, e.g. ``jaxdet predict --checkpoint`` or ``train.init_checkpoint``), else
    ``accurate``."""
    mode = getattr(config.data, "jpeg_decode", "auto")
    if mode != "auto":
        return mode
    if weights_format != "tf":
        return "accurate"
    if not _said_tf_decode:
        _said_tf_decode.append(True)
        log.info("data.jpeg_decode auto: the weights come from a TF checkpoint, so JPEGs decode "
                 "to the pixels tf.io.decode_jpeg gives (set data.jpeg_decode=accurate to "
                 "decode as Pillow does)")
    return "tf"


_said_tf_decode: list[bool] = []


def keypoint_specs(config: S.Config) -> tuple[KeypointSpec, ...]:
    """The keypoint groups the model's keypoint tasks read (``model.keypoint_tasks``, in
    order); empty for a model without them (SSD, a CenterNet without keypoint tasks)."""
    tasks = getattr(config.model, "keypoint_tasks", None) or ()
    return tuple(KeypointSpec(class_name=t.class_name, names=tuple(t.keypoints),
                              skeleton=tuple(tuple(e) for e in t.skeleton)) for t in tasks)


def load_masks(config: S.Config) -> bool:
    """Whether sources read instance masks (``data.load_masks``): pass it to
    :func:`build_source` as ``masks``."""
    return bool(config.data.load_masks)


def mask_shape(config: S.Config) -> tuple[int, int]:
    """The static (Hm, Wm) of batch ``masks``: the input size // ``data.mask_stride``."""
    h, w = input_size(config.data)
    return h // config.data.mask_stride, w // config.data.mask_stride


def build_source(cfg: S.DatasetConfig, workdir: str | Path | None = None, *,
                 num_classes: int | None = None, field: str | None = None,
                 keypoints: Sequence[KeypointSpec] = (), masks: bool = False):
    """A data source. Relative shapes ``output_dir`` paths are placed under ``workdir``.

    ``num_classes`` (the model's) bounds TFRecord labels (default: the label map's largest
    id); ``field`` ("data.train" / "data.eval") names the config section in errors.
    ``keypoints`` (:func:`keypoint_specs`): the keypoint groups the records carry (COCO JSON,
    TFRecord and generated shapes; Pascal VOC has no keypoints and refuses them).
    ``masks`` (:func:`load_masks`): the records carry instance masks (every kind of source;
    generated shapes are written with their exact masks). With ``sample_1_of_n_examples`` n > 1
    the source keeps its items 0, n, 2n, ... (``data.sampling.EveryNth``).
    """
    source = _build_source(cfg, workdir, num_classes=num_classes, field=field,
                           keypoints=tuple(keypoints), masks=masks)
    return every_nth(source, cfg.sample_1_of_n_examples)


def _build_source(cfg: S.DatasetConfig, workdir: str | Path | None, *, num_classes: int | None,
                  field: str | None, keypoints: tuple[KeypointSpec, ...], masks: bool):
    """Every example of the source ``cfg`` describes (:func:`build_source`'s arguments)."""
    if isinstance(cfg, S.TfRecordDataConfig):
        check_dataset_paths(cfg, field)
        return TfRecordSource(cfg.input_path, cfg.label_map_path, num_classes,
                              keypoints=keypoints, masks=masks)
    if isinstance(cfg, S.CocoDataConfig):
        return CocoSource(cfg.annotation_file, cfg.image_dir, class_index=cfg.class_index,
                          keypoints=keypoints, masks=masks)
    if isinstance(cfg, S.VocDataConfig):
        if keypoints:
            classes = ", ".join(sorted({k.class_name for k in keypoints}))
            raise ConfigError(
                f"{field or 'data'}: Pascal VOC annotations have no keypoints, but the model's "
                f"keypoint tasks (model.keypoint_tasks, classes {classes}) need them; use a "
                "COCO JSON or TFRecord dataset with keypoints, or remove the keypoint tasks")
        names = list(cfg.class_names) if cfg.class_names else None
        return VocSource(cfg.annotation_dir, cfg.image_dir, class_names=names, masks=masks)
    out = Path(cfg.output_dir)
    if not out.is_absolute() and workdir is not None:
        out = Path(workdir) / out
    annotations = generate_shapes(
        out,
        cfg.num_images,
        image_size=tuple(cfg.image_size),
        seed=cfg.seed,
        num_classes=cfg.num_classes,
        max_objects=cfg.max_objects,
        min_size_frac=cfg.min_size_frac,
        max_size_frac=cfg.max_size_frac,
        keypoints=cfg.keypoints,
        masks=masks,
    )
    return CocoSource(annotations, Path(annotations).parent / "images", keypoints=keypoints,
                      masks=masks)


def check_class_count(config: S.Config, source) -> None:
    """Refuse a dataset with more classes than the model predicts (they would be dropped)."""
    found = getattr(source, "num_classes", None)
    if found is not None and found > config.model.num_classes:
        names = list(getattr(source, "category_names", []) or [])
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ValueError(
            f"the dataset {source!r} has {found} classes ({shown}) but model.num_classes is "
            f"{config.model.num_classes}; set --set model.num_classes={found}"
        )


def build_train_loader(config: S.Config, source, *, seed: int | None = None,
                       shard_index: int | None = None, shard_count: int | None = None,
                       layout=None, weights_format: str | None = None):
    """Infinite, deterministic, resumable training batches (see ``data.loader``): images of
    ``data.train_image_dtype``, not normalized (the train step does:
    ``train.build.build_train_step(..., normalizer=...)``); ``layout``:
    :func:`train_batch_layout`, which the first batch is checked against; ``weights_format``:
    where the run's starting weights come from, for :func:`decode_mode`.

    ``train.batch_size`` is the global batch; process ``shard_index`` of ``shard_count``
    (default: this JAX process of all) gets its ``batch_size // shard_count`` rows of each.
    """
    check_class_count(config, source)
    shard_index = jax.process_index() if shard_index is None else shard_index
    shard_count = jax.process_count() if shard_count is None else shard_count
    return make_train_loader(
        source,
        build_transforms(config.data, training=True, normalize=False),
        batch_size=config.train.batch_size,
        max_boxes=config.data.max_number_of_boxes,
        seed=config.train.seed if seed is None else seed,
        worker_count=resolve_worker_count(config.data.worker_count,
                                          accelerator=not dispatch.on_cpu()),
        shard_index=shard_index,
        shard_count=shard_count,
        gather=gather_ints if shard_count == jax.process_count() > 1 else None,
        layout=layout,
        image_dtype=config.data.train_image_dtype,
        decode=decode_mode(config, weights_format),
    )


def build_eval_loader(config: S.Config, source, *, weights_format: str | None = None):
    """One ordered pass, last batch padded and masked; float32 images, not normalized (the
    predict function normalizes: :func:`pixel_normalizer`). ``weights_format``: where the
    weights come from, for :func:`decode_mode`."""
    check_class_count(config, source)
    return make_eval_loader(
        source,
        build_transforms(config.data, training=False, normalize=False),
        batch_size=config.eval.batch_size,
        max_boxes=config.data.max_number_of_boxes,
        worker_count=resolve_worker_count(config.data.worker_count, training=False),
        decode=decode_mode(config, weights_format),
    )
