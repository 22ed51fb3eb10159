"""Backbones, laid out like the torchvision / timm / Keras models whose checkpoints they read:
``resnet`` (ResNet-18 ... 152, v1.5), ``resnet_v2`` (pre-activation ResNet-v2), ``mobilenet``
(MobileNet V1 and V2), ``efficientnet`` (EfficientNet B0-B7), ``inception_resnet_v2``
(Faster / Mask R-CNN's Inception-ResNet-v2), ``hourglass`` (CenterNet's stacked Hourglass)."""
