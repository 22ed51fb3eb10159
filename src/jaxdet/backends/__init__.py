"""What depends on the machine the code runs on, kept in one place.

``trace`` says what the code being traced is for (an exported artifact must hold only
portable ops) and whether it runs on one device; ``native_build`` compiles jaxdet's native
sources (``native/``) once per machine; ``cpu/`` holds what only XLA:CPU uses: the hand-written
XLA FFI kernels (``kernels``), the block-cache allocator and huge pages (``allocator``) and the
compile options (``compile_options``).

Modules: ``dispatch`` (the ops with backend-specific forms, by name: the one module model, core
and job code imports for them), ``process`` (what a process sets up before jax starts: the
allocator), ``compile_cache`` (compiled programs kept on disk between runs), ``device_memory``
(memory free on a device for a new allocation), ``trace`` (the forms a trace takes),
``pooling_windows`` (the window views both pooling forms are built from), ``native_build``
(native sources compiled once per machine), ``cpu/`` (XLA:CPU only).
"""
