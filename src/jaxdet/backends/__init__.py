"""What depends on the machine the code runs on, kept in one place.

``trace`` says what the code being traced is for (an exported artifact must hold only
portable ops) and whether it runs on one device; ``native_build`` compiles jaxdet's native
sources (``native/``) once per machine; ``cpu/`` holds what only XLA:CPU uses: the hand-written
XLA FFI kernels (``kernels``), the block-cache allocator and huge pages (``allocator``) and the
compile options (``compile_options``).
"""
