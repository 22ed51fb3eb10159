"""A small TF OD API pipeline.config on generated TFRecords, as a TF user's folder holds them:
shared by the tests of ``jaxdet train --pipeline-config`` and of TF's own commands, and by
the TF-side fixture script of a TF model_dir (which imports :data:`PIPELINE` only)."""

from __future__ import annotations

from pathlib import Path

# A small RetinaNet-style SSD in TF OD API terms (MobileNet v2 x0.25 + FPN P3-P5, 64x64).
PIPELINE = """
model {
  ssd {
    num_classes: 3
    image_resizer { fixed_shape_resizer { height: 64 width: 64 } }
    feature_extractor {
      type: 'ssd_mobilenet_v2_fpn_keras'
      depth_multiplier: 0.25
      min_depth: 8
      fpn { min_level: 3 max_level: 5 additional_layer_depth: 16 }
      conv_hyperparams {
        activation: RELU_6
        regularizer { l2_regularizer { weight: 0.00004 } }
        initializer { truncated_normal_initializer { stddev: 0.03 } }
        batch_norm { scale: true decay: 0.97 epsilon: 0.001 }
      }
      override_base_feature_extractor_hyperparams: true
    }
    box_coder { faster_rcnn_box_coder { y_scale: 10.0 x_scale: 10.0 height_scale: 5.0
                                        width_scale: 5.0 } }
    matcher { argmax_matcher { matched_threshold: 0.5 unmatched_threshold: 0.5
                               force_match_for_each_row: true use_matmul_gather: true } }
    similarity_calculator { iou_similarity {} }
    encode_background_as_zeros: true
    add_background_class: false
    anchor_generator { multiscale_anchor_generator { min_level: 3 max_level: 5
                       anchor_scale: 4.0 aspect_ratios: [1.0, 2.0, 0.5] scales_per_octave: 2 } }
    box_predictor {
      weight_shared_convolutional_box_predictor {
        depth: 16 num_layers_before_predictor: 1 kernel_size: 3
        class_prediction_bias_init: -4.6
        conv_hyperparams {
          activation: RELU_6
          regularizer { l2_regularizer { weight: 0.00004 } }
          initializer { random_normal_initializer { stddev: 0.01 } }
          batch_norm { scale: true decay: 0.97 epsilon: 0.001 }
        }
      }
    }
    loss {
      classification_loss { weighted_sigmoid_focal { alpha: 0.25 gamma: 2.0 } }
      localization_loss { weighted_smooth_l1 {} }
    }
    normalize_loss_by_num_matches: true
    post_processing {
      batch_non_max_suppression { score_threshold: 0.0 iou_threshold: 0.6
                                  max_detections_per_class: 10 max_total_detections: 10 }
      score_converter: SIGMOID
    }
  }
}
train_config {
  batch_size: 4
  num_steps: 3
  fine_tune_checkpoint: "PATH_TO_BE_CONFIGURED/mobilenet_v2.ckpt-1"
  fine_tune_checkpoint_version: V2
  data_augmentation_options { random_horizontal_flip {} }
  data_augmentation_options { random_adjust_brightness { max_delta: 0.1 } }
  optimizer {
    momentum_optimizer {
      learning_rate { cosine_decay_learning_rate { learning_rate_base: 0.02 total_steps: 3
                      warmup_learning_rate: 0.01 warmup_steps: 1 } }
      momentum_optimizer_value: 0.9
    }
    use_moving_average: false
  }
  max_number_of_boxes: 8
}
train_input_reader {
  label_map_path: "LABEL_MAP"
  tf_record_input_reader { input_path: "TRAIN_GLOB" }
}
eval_config {
  metrics_set: "coco_detection_metrics"
  metrics_set: "pascal_voc_detection_metrics"
  use_moving_averages: false
  num_visualizations: 2
}
eval_input_reader {
  label_map_path: "LABEL_MAP"
  shuffle: false
  num_epochs: 1
  tf_record_input_reader { input_path: "EVAL_FILE" }
}
"""


def write_pipeline(root: Path, *, fine_tune_placeholder: bool = True) -> Path:
    """Generated shapes written as TFRecord (train: 16 images in 2 shards, eval: 6) + label
    map + ``root/pipeline.config``; without ``fine_tune_placeholder`` the config names no
    fine-tune checkpoint (it trains from scratch, as it stands). Returns the config's path."""
    from jaxdet.data.coco import CocoSource  # this module's PIPELINE is read without jaxdet
    from jaxdet.data.shapes import generate_shapes
    from jaxdet.jobs.convert_dataset import source_to_tfrecord

    for split, n, seed, shards in (("train", 16, 0, 2), ("eval", 6, 1, 1)):
        ann = generate_shapes(root / f"shapes_{split}", n, image_size=(64, 64), seed=seed)
        source = CocoSource(ann, Path(ann).parent / "images")
        source_to_tfrecord(source, root / f"{split}.tfrecord", shards=shards,
                           label_map_out=root / "label_map.pbtxt", progress=False)
    text = (PIPELINE.replace("LABEL_MAP", str(root / "label_map.pbtxt"))
            .replace("TRAIN_GLOB", str(root / "train.tfrecord-?????-of-00002"))
            .replace("EVAL_FILE", str(root / "eval.tfrecord")))
    if not fine_tune_placeholder:
        text = "\n".join(line for line in text.splitlines()
                         if "fine_tune_checkpoint" not in line)
    path = root / "pipeline.config"
    path.write_text(text)
    return path
