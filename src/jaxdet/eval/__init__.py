"""Evaluation: scoring a detector's outputs against ground truth, and drawing them.

Modules: ``runner`` (run a detector over an eval loader, score it, draw samples),
``coco_eval`` (COCO box metrics with pycocotools), ``coco_mask_eval`` (COCO ``segm`` metrics,
RLE, mask pasting), ``coco_keypoint_eval`` (COCO keypoint OKS AP), ``voc_eval`` (Pascal VOC
AP at IoU 0.5), ``visualize`` (detections and image grids drawn with Pillow)."""
