"""What a model's results are made of: ``detections`` (``Detections`` and ``Detection``: what a
detector found in one image, with COCO / JSON / table / picture views) and ``labels``
(``Labels``: a model's class ids and names, keypoint names and skeletons).
"""
