"""XLA:CPU only: FFI kernels, the block-cache allocator, compile options (see ``backends``)."""
