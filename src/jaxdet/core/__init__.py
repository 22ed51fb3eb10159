"""Pure array code shared by several families: no Flax, no config; static shapes, jittable and
vmappable.

Modules: ``box_ops`` (box arithmetic, IoU), ``box_coders`` (boxes <-> regression targets),
``anchors`` (SSD and multiscale anchor generators), ``grid_anchors`` (Faster R-CNN's grid
anchors), ``matcher`` (argmax and greedy bipartite matching), ``target_assigner`` (per-image
targets of anchor-based detectors), ``losses`` (elementwise detection losses), ``nms``
(batched multi-class NMS), ``greedy_nms`` (one candidate set, as a loop or one primitive),
``roi_ops`` (crop-and-resize, RoI Align), ``mask_ops`` (per-box masks pasted into the image),
``coordinates`` (detections back to original-image pixels), ``precision`` (compute dtypes),
``portable`` (exporter-friendly forms of the same ops)."""
