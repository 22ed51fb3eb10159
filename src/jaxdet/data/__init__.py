"""Host-side input pipeline (numpy + Pillow + grain); no JAX here.

Modules:
  records      the record a source yields; SkipCounter for dropped / repaired items
  coco, voc    CocoSource, VocSource (COCO JSON, Pascal VOC XML)
  shapes       generate_shapes: synthetic COCO-format data set for demos and tests
  decode       load_image -> uint8 RGB, CorruptImageError
  augment      frozen-dataclass augment ops (image and boxes move together)
  resize       FixedShapeResizer, KeepAspectRatioResizer (static output shapes)
  geometry     shared resize / box re-framing helpers
  keypoints    keypoint layouts and the checks sources apply to keypoints
  masks        instance masks: COCO polygons / RLE, PNG masks, nearest-neighbour moves
  ground_truth pad_ground_truth to max_boxes with valid / ignore masks
  loader       make_train_loader (endless, resumable, per-process rows)
  eval_loader  make_eval_loader (one ordered pass, padded, masked)
"""
