"""The model a command runs, from its ``--config`` / ``--pipeline-config`` / ``--workdir`` /
``--checkpoint`` / ``--set``: resolved by ``model_source`` as ``jaxdet.load`` resolves it, so
``--workdir`` alone takes what ``jaxdet.load`` takes as its model folder (a jaxdet workdir or
a TF2 zoo model folder) and a mistake reads the same from either."""

from __future__ import annotations

import argparse

from jaxdet import files
from jaxdet.config.loader import ConfigError, load_config, shipped_config_names
from jaxdet.config.schema import Config
from jaxdet.jobs.model_source import ModelSource, model_source, workdir_not_found


def named_config(args: argparse.Namespace) -> Config:
    """The config named by --config or --pipeline-config, with --set overrides."""
    if getattr(args, "pipeline_config", None):
        from jaxdet.config.tfod import load_pipeline_config

        return load_pipeline_config(args.pipeline_config, args.overrides)
    return load_config(args.config, args.overrides)


def model_of_args(args: argparse.Namespace) -> ModelSource:
    """The config and the weights of ``eval`` / ``predict`` / ``export``: --config or
    --pipeline-config with --workdir (a run's checkpoints) and / or --checkpoint; or
    --workdir alone, a jaxdet workdir or a TF2 zoo model folder (``pipeline.config`` and
    ``checkpoint/ckpt-N``), with --checkpoint to take other weights.

    Raises:
      ConfigError: nothing names weights, a workdir that does not exist (the same line as
        ``jaxdet.load``'s), --step with weights that have no steps."""
    if args.config or args.pipeline_config:
        source = model_source(named_config(args), workdir=args.workdir,
                              checkpoint=args.checkpoint)
    elif args.workdir is None:
        raise ConfigError("give --workdir (a trained run or a TF2 zoo model folder), or "
                          "--checkpoint with --pipeline-config / --config describing its model")
    else:
        if not files.exists(args.workdir) and str(args.workdir) in shipped_config_names():
            raise ConfigError(f"{workdir_not_found(args.workdir)}; {args.workdir} is a "
                              f"shipped config: give it as --config {args.workdir} (with "
                              "--checkpoint for its weights)")
        source = model_source(workdir=args.workdir, checkpoint=args.checkpoint,
                              overrides=args.overrides)
    if not source.has_weights:
        raise ConfigError(f"{args.workdir} holds no checkpoint/ckpt-N: give --checkpoint"
                          if args.workdir is not None else
                          "give --workdir (a trained run or a TF2 zoo model folder) or "
                          "--checkpoint (TF OD API or jaxdet weights)")
    if args.step is not None and source.checkpoint is not None:
        raise ConfigError("--step picks a checkpoint of --workdir; it does not apply to "
                          "--checkpoint or a TF2 zoo model folder")
    return source


__all__ = ["model_of_args", "named_config"]
