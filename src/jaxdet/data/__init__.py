"""Input pipeline: host side (numpy, libjpeg-turbo, Pillow, grain, one C resampler) and the
device-side normalization of what it sends (``normalize``, in JAX, inside the jitted step).

Modules:
  ``records``          the record a source yields; SkipCounter for dropped / repaired items
  ``coco``, ``voc``    CocoSource, VocSource (COCO JSON, Pascal VOC XML)
  ``coco_names``       COCO's category names, as the TF model zoo numbers them
  ``annotated_size``   the size an annotation gives an image against its decoded size
  ``tfrecord``         TFRecord files and tf.train.Example protos, without TensorFlow
  ``tfrecord_source``  TfRecordSource: TF OD API TFRecords -> records
  ``boxes_json``       the few-shot example's normalized boxes per image, as a source
  ``shapes``           generate_shapes: synthetic COCO-format data set for demos and tests
  ``stats``            what a data set holds: images, boxes per class, box sizes
  ``decode``           load_image -> uint8 RGB (JPEGs as Pillow or as TF decodes them)
  ``pixels``           images given in memory (numpy, PIL) as the pipeline's RGB arrays
  ``augment``          frozen-dataclass augment ops (image and boxes move together)
  ``augment_color``    the TF OD API's photometric augment ops
  ``augment_crop``     the TF OD API's crops and pads
  ``resize``           FixedShapeResizer, KeepAspectRatioResizer (static output shapes)
  ``geometry``         shared resize / box re-framing helpers
  ``resample``         separable resampling (TF's bilinear, Pillow's filter) into canvases
  ``normalize``        PixelNormalizer: raw uint8 / float pixels -> the network's input
  ``host_memory``      glibc malloc tuning: image-sized buffers reused between samples
  ``keypoints``        keypoint layouts and the checks sources apply to keypoints
  ``masks``            instance masks: COCO polygons / RLE, PNG masks, nearest-neighbour moves
  ``ground_truth``     pad_ground_truth to max_boxes with valid / ignore masks
  ``batch_layout``     what a train batch holds, per field (shapes, dtypes, mesh axes)
  ``sample_pipeline``  one record -> one padded sample (decode, transforms, ground truth)
  ``chunks``           samples handed from worker processes a chunk at a time
  ``worker_pool``      worker processes forked from one preloaded server; shared-memory chunks
  ``loader``           make_train_loader (endless, resumable, per-process rows)
  ``eval_loader``      make_eval_loader (one ordered pass, padded, masked)
  ``sampling``         EveryNth: one example in every n of a source (sample_1_of_n_examples)
  ``build``            config -> resizer, augment ops, sources, train and eval loaders
"""
