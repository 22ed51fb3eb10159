"""The ``jaxdet`` command: a thin layer over the jobs (``jaxdet.jobs``).

Modules: ``main`` (the parser and every command; ``main()`` is the console script),
``errors`` (what went wrong, in one line, above progress bars), ``model_args`` (the model a
command runs, from ``--config`` / ``--workdir`` / ``--checkpoint``, resolved as
``jaxdet.load`` resolves it), ``staging`` (commands on a workdir or output folder in a bucket).
"""
