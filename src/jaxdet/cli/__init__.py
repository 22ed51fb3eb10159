"""The ``jaxdet`` command: a thin layer over the jobs (``jaxdet.jobs``).

Modules: ``main`` (the parser and every command; ``main()`` is the console script),
``export_command`` (``jaxdet export``'s options and command),
``errors`` (what went wrong, in one line, above progress bars), ``model_args`` (the model a
command runs, from ``--config`` / ``--workdir`` / ``--checkpoint``, resolved as
``jaxdet.load`` resolves it), ``staging`` (commands on a workdir or output folder in a bucket),
the TF OD API's scripts by their own names and flags: ``model_main_tf2``, ``exporter_main_v2``,
``export_tflite_graph_tf2`` (each a console script too), ``tfod_flags`` (absl's flag syntax),
``tfod_program`` (how those scripts run: help, logging flags, one-line errors).
"""
