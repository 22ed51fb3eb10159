"""Input pipeline: host side (numpy, libjpeg-turbo, Pillow, grain, one C resampler) and the
device-side normalization of what it sends (``normalize``, in JAX, inside the jitted step).

Modules:
  records      the record a source yields; SkipCounter for dropped / repaired items
  coco, voc    CocoSource, VocSource (COCO JSON, Pascal VOC XML)
  shapes       generate_shapes: synthetic COCO-format data set for demos and tests
  decode       load_image -> uint8 RGB (JPEGs as Pillow or as TF decodes them), CorruptImageError
  augment      frozen-dataclass augment ops (image and boxes move together)
  resize       FixedShapeResizer, KeepAspectRatioResizer (static output shapes)
  geometry     shared resize / box re-framing helpers
  resample     separable resampling (TF's bilinear, Pillow's filter) from views into canvases
  normalize    PixelNormalizer: raw uint8 / float pixels -> the network's input, in the step
  host_memory  glibc malloc tuning: image-sized buffers reused between samples
  keypoints    keypoint layouts and the checks sources apply to keypoints
  masks        instance masks: COCO polygons / RLE, PNG masks, nearest-neighbour moves
  ground_truth pad_ground_truth to max_boxes with valid / ignore masks
  sample_pipeline  one record -> one padded sample (decode, transforms, ground truth)
  loader       make_train_loader (endless, resumable, per-process rows)
  eval_loader  make_eval_loader (one ordered pass, padded, masked)
"""
