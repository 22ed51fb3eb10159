"""What training and inference reach: AP and detections against the TF OD API (the same
pipeline.config, data and checkpoints), the training equivalence ladder, exported artifacts
against predict, and the manual's recipes (own data, few-shot) run as written."""
