"""XLA:CPU only (see ``backends``): ``kernels`` (jaxdet's XLA FFI kernels), ``allocator`` (the
block-cache allocator and huge pages), ``compile_options`` (which library runs the
convolutions), and the rewrites ``backends.dispatch`` picks on one CPU device: ``conv2d``
(depthwise and 1x1 convolutions), ``winograd`` (3x3 stride-1 convolutions), ``conv3d`` (3D
convolutions as 2D ones), ``batch_norm`` (training-mode batch norm with a hand-written
gradient), ``pooling`` (max pooling with a hand-written gradient)."""
