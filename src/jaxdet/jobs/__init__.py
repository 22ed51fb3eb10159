"""Whole jobs on a config, shared by the command line and the Python API.

Modules: ``runs`` (train with periodic evaluation, import weights into a workdir; the names of
the workdir jobs in one place), ``evaluation`` (evaluate a checkpoint or loaded weights),
``inference`` (load weights for evaluation, prediction and export: a workdir's checkpoint or
another framework's), ``run_fingerprint`` (what fixes a
workdir's tensors), ``model_source`` (what names a model: workdir, zoo folder,
pipeline.config, config), ``detector`` (``Detector``: predict on arrays and files, evaluate,
export), ``predict`` (``jaxdet predict``), ``export_job`` (``jaxdet export``), ``fine_tune``
(few-shot fine-tuning from images in memory), ``eval_watch`` (evaluation beside a training
run, also of a TF model_dir), ``tf_run`` (a TF OD API model_dir's run continued),
``convert_dataset`` (``jaxdet convert-dataset``), ``plots`` (training curves).
"""
