"""The explicit table of TF OD API pipeline.config fields that have no jaxdet setting.

A field the mapper (``config/tfod.py``) neither reads nor finds here is an error. A field found
here is reported, never dropped silently:

* ``SAME`` — jaxdet already behaves this way (e.g. ``use_matmul_gather``: jaxdet always gathers
  with static shapes); one DEBUG line each (an INFO line counts them), and a comment in
  ``convert-config``'s YAML.
* ``DIFFERS`` — accepted, but jaxdet does something else or nothing; one WARNING line each that
  says what.

Keys are dotted field paths from the file's root; a key matches the field itself and
everything under it. ``*`` matches one path element.
"""

from __future__ import annotations

import fnmatch

_SSD = "model.ssd"
_FE = f"{_SSD}.feature_extractor"
_BP = f"{_SSD}.box_predictor.*"
_CN = "model.center_net"
_KP = f"{_CN}.keypoint_estimation_task"
_FR = "model.faster_rcnn"
_TRAIN = "train_config"
_READERS = ("train_input_reader", "eval_input_reader")

SAME: dict[str, str] = {
    f"{_SSD}.inplace_batchnorm_update": "jaxdet updates batch-norm statistics in the train step",
    f"{_SSD}.matcher.argmax_matcher.use_matmul_gather": "jaxdet always gathers with static shapes",
    f"{_SSD}.matcher.bipartite_matcher.use_matmul_gather":
        "jaxdet always gathers with static shapes",
    f"{_SSD}.similarity_calculator.iou_similarity": "IoU is jaxdet's similarity",
    f"{_SSD}.anchor_generator.multiscale_anchor_generator.normalize_coordinates":
        "jaxdet anchors are always normalized",
    f"{_SSD}.post_processing.batch_non_max_suppression.use_static_shapes":
        "jaxdet's NMS always has static shapes",
    f"{_SSD}.post_processing.batch_non_max_suppression.use_partitioned_nms":
        "jaxdet's NMS always has static shapes",
    f"{_SSD}.post_processing.batch_non_max_suppression.change_coordinate_frame":
        "boxes are normalized to the image",
    f"{_SSD}.image_resizer.fixed_shape_resizer.resize_method":
        "bilinear resizing (TF's default) — only BILINEAR is accepted",
    f"{_BP}.box_code_size": "4 box coordinates",
    f"{_BP}.apply_sigmoid_to_scores": "raw logits (only false is accepted)",
    f"{_BP}.conv_hyperparams.batch_norm.scale": "batch norm has a scale (only true is accepted)",
    f"{_BP}.conv_hyperparams.batch_norm.center": "batch norm has a bias (only true is accepted)",
    f"{_FE}.conv_hyperparams.batch_norm.scale": "batch norm has a scale (only true is accepted)",
    f"{_FE}.conv_hyperparams.batch_norm.center": "batch norm has a bias (only true is accepted)",
    f"{_BP}.conv_hyperparams.force_use_bias": "convolutions without batch norm have biases",
    f"{_FE}.conv_hyperparams.force_use_bias":
        "convolutions without batch norm have biases (BiFPN node convolutions always have one)",
    f"{_FE}.bifpn.use_native_resize_op": "BiFPN upsampling is nearest-neighbour 2x either way",
    f"{_SSD}.loss.localization_loss.weighted_smooth_l1.anchorwise_output":
        "losses are per anchor before reduction",
    f"{_SSD}.loss.classification_loss.weighted_sigmoid.anchorwise_output":
        "losses are per anchor before reduction",
    f"{_SSD}.loss.classification_loss.weighted_sigmoid_focal.anchorwise_output":
        "losses are per anchor before reduction",
    f"{_CN}.compute_heatmap_sparse": "how TF computes the heatmap targets (memory), not what",
    f"{_CN}.feature_extractor.use_depthwise":
        "TF's CenterNet feature extractors ignore it (MobileNetV2-FPN: use_separable_conv)",
    f"{_KP}.per_keypoint_depth": "used only with predict_depth (not supported: an error)",
    f"{_KP}.keypoint_depth_loss_weight": "used only with predict_depth (not supported: an error)",
    f"{_KP}.rescoring_threshold": "used only with rescore_instances (not supported: an error)",
    f"{_KP}.score_distance_multiplier":
        "used only by candidate_ranking_mode 'score_scaled_distance_ratio' (not supported)",
    f"{_KP}.std_dev_multiplier":
        "used only by candidate_ranking_mode 'gaussian_weighted' (not supported)",
    f"{_KP}.gaussian_denom_ratio":
        "used only by candidate_ranking_mode 'gaussian_weighted_const' (not supported)",
    f"{_FR}.use_static_shapes": "jaxdet always has static shapes",
    f"{_FR}.use_static_shapes_for_eval": "jaxdet always has static shapes",
    f"{_FR}.use_static_balanced_label_sampler":
        "jaxdet's balanced samplers always have static shapes",
    f"{_FR}.use_matmul_gather_in_matcher": "jaxdet always gathers with static shapes",
    f"{_FR}.use_partitioned_nms_in_first_stage": "jaxdet's NMS always has static shapes",
    f"{_FR}.use_combined_nms_in_first_stage": "jaxdet's NMS always has static shapes",
    f"{_FR}.inplace_batchnorm_update": "jaxdet updates batch-norm statistics in the train step",
    f"{_FR}.feature_extractor.conv_hyperparams.batch_norm.scale":
        "batch norm has a scale (only true is accepted)",
    f"{_FR}.feature_extractor.conv_hyperparams.batch_norm.center":
        "batch norm has a bias (only true is accepted)",
    f"{_FR}.first_stage_anchor_generator.multiscale_anchor_generator.normalize_coordinates":
        "jaxdet anchors are always normalized",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.use_static_shapes":
        "jaxdet's NMS always has static shapes",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.use_partitioned_nms":
        "jaxdet's NMS always has static shapes",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.use_combined_nms":
        "jaxdet's NMS always has static shapes",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.use_hard_nms":
        "jaxdet's NMS is greedy hard NMS",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.use_cpu_nms":
        "where NMS runs, not what it computes",
    f"{_FR}.second_stage_post_processing.batch_non_max_suppression.change_coordinate_frame":
        "boxes are normalized to the image",
    f"{_FR}.second_stage_classification_loss.weighted_softmax.anchorwise_output":
        "losses are per proposal before reduction",
    f"{_FR}.resize_masks": "ground-truth masks are always resized with their image (the "
                           "resizer moves them, nearest neighbour)",
    f"{_TRAIN}.sync_replicas": "jaxdet's data parallelism is synchronous; batch_size is global",
    f"{_TRAIN}.replicas_to_aggregate": "batch_size is the global batch",
    f"{_TRAIN}.startup_delay_steps": "all devices start together",
    f"{_TRAIN}.unpad_groundtruth_tensors": "ground truth is always padded to static shapes",
    f"{_TRAIN}.add_regularization_loss": "weight decay is applied through the optimizer",
    f"{_TRAIN}.batch_queue_capacity": "grain's loader manages its own queue",
    f"{_TRAIN}.num_batch_queue_threads": "grain's loader manages its own threads",
    f"{_TRAIN}.prefetch_queue_capacity": "grain's loader manages its own prefetching",
    f"{_TRAIN}.summarize_gradients": "jaxdet logs the gradient norm",
    "eval_config.max_evals": "jaxdet evaluates every train.eval_every steps and at the end",
    "eval_config.eval_interval_secs": "jaxdet evaluates every train.eval_every steps",
    "eval_config.visualize_groundtruth_boxes": "the sample grid shows ground truth beside",
    "eval_config.skip_scores": "not used",
    "eval_config.skip_labels": "not used",
    **{f"{r}.{f}": "grain's loader handles reading and prefetching"
       for r in _READERS
       for f in ("num_readers", "queue_capacity", "min_after_dequeue", "read_block_length",
                 "num_parallel_batches", "num_prefetch_batches", "prefetch_size",
                 "num_parallel_map_calls", "filenames_shuffle_buffer_size",
                 "shuffle_buffer_size", "num_additional_channels")},
    "train_input_reader.shuffle": "the train loader shuffles every epoch",
    "train_input_reader.num_epochs": "train.num_steps decides the length",
    "eval_input_reader.shuffle": "evaluation reads every image once, in order",
    "eval_input_reader.num_epochs": "evaluation reads every image once",
}

DIFFERS: dict[str, str] = {
    f"{_FR}.second_stage_box_predictor.mask_rcnn_box_predictor.conv_hyperparams":
        "the mask head's convolutions (used only with predict_instance_masks)",
    f"{_FR}.return_raw_detections_during_predict":
        "jaxdet's predict returns the final boxes, scores and classes",
    f"{_FR}.output_final_box_features": "jaxdet's predict returns no box features",
    f"{_FR}.feature_extractor.conv_hyperparams.initializer":
        "jaxdet uses its own initializers (He-normal convolutions, zero biases)",
    f"{_FR}.output_final_box_rpn_features": "jaxdet's predict returns no box features",
    f"{_TRAIN}.keep_checkpoint_every_n_hours":
        "jaxdet keeps the last train.keep_checkpoints checkpoints",
    f"{_CN}.output_prediction_dict":
        "jaxdet's predict returns boxes, scores, classes (and keypoints), never raw head maps",
    f"{_TRAIN}.retain_original_images": "not used",
    "eval_config.include_metrics_per_category":
        "per-category COCO AP is not computed (Pascal VOC metrics list every class)",
    "eval_config.min_score_threshold": "samples.png draws detections scoring >= 0.3",
    "eval_config.max_num_boxes_to_visualize": "samples.png draws every detection >= 0.3",
    "eval_config.batch_size": "jaxdet evaluates in batches of eval.batch_size (default 8); "
                              "the metrics do not depend on it",
    "eval_config.eval_instance_masks":
        "masks are evaluated when eval.metrics_set has coco_mask_metrics",
    # a CenterNet with keypoint tasks reads these (skeleton, oks_sigmas); other models don't
    "eval_config.keypoint_edge": "only CenterNet keypoint tasks have keypoints",
    "eval_config.parameterized_metric": "only CenterNet keypoint tasks have keypoints",
    "eval_config.super_categories": "super-category metrics are not computed",
    **{f"{r}.{f}": "jaxdet has no multiclass scores or context features yet"
       for r in _READERS for f in ("load_multiclass_scores", "load_context_features")},
    # a CenterNet with keypoint tasks checks it against its keypoints; other models don't
    **{f"{r}.num_keypoints": "only CenterNet keypoint tasks read keypoints" for r in _READERS},
}


def lookup(path: str) -> tuple[str, str] | None:
    """``("same" | "differs", why)`` for a field path the table covers, else None."""
    for kind, table in (("same", SAME), ("differs", DIFFERS)):
        for key, why in table.items():
            parts = key.split(".")
            head = ".".join(path.split(".")[: len(parts)])
            if fnmatch.fnmatchcase(head, key):
                return kind, why
    return None
