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


def add_config_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--config`` / ``--pipeline-config`` (one of them; ``required``) and ``--set``."""
    which = p.add_mutually_exclusive_group(required=required)
    which.add_argument("--config",
                       help="a shipped config name (see `jaxdet configs`) or a YAML file")
    which.add_argument("--pipeline-config", metavar="FILE",
                       help="a TF Object Detection API pipeline.config (instead of --config)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="A.B=C",
                   help="override a config field (repeatable), e.g. --set train.batch_size=4")


def add_model_source_args(p: argparse.ArgumentParser) -> None:
    """Where a model to run comes from: its config, a workdir and / or a checkpoint."""
    add_config_args(p, required=False)
    p.add_argument("--workdir", default=None,
                   help="the trained run (checkpoints/, config.yaml) or a TF2 zoo model "
                        "folder (pipeline.config, checkpoint/); not needed with --checkpoint")
    add_checkpoint_args(p)


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """``--checkpoint`` (weights other than the workdir's) and ``--checkpoint-format``."""
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="weights to use instead of the workdir's: a TF OD API checkpoint "
                        "(a zoo model's checkpoint/ckpt-0), another jaxdet workdir or a PyTorch "
                        "state dict (.safetensors/.pth: effdet, torchvision RetinaNet), with "
                        "--pipeline-config or --config describing its model")
    p.add_argument("--checkpoint-format", default="auto",
                   choices=("auto", "tf", "jaxdet", "torch"),
                   help="the --checkpoint's format (default: recognised from the path)")
