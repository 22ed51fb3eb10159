"""Network parts shared by several families, and what every task gives the rest of jaxdet.

Modules and subpackages: ``layers`` (building blocks of backbones, necks and heads),
``initializers`` (parameter initializers drawn on the host), ``param_rules`` (rules that pick
parameters by path), ``backbones/`` (ResNet, MobileNet, EfficientNet, ...), ``necks/`` (FPN,
identity), ``features`` (backbone -> neck feature maps by level), ``build`` (backbones and
shared necks from a config), ``abstract`` (abstract builds, shapes only), ``inspect``
(parameter counts, FLOPs, multiply-adds), ``remat`` (gradient checkpointing of chosen parts),
``thin_maps`` (thin feature maps kept whole on a spatial mesh), ``task`` (the task seam: what
every task gives train, eval and the jobs)."""
