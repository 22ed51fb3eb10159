"""Command line: ``jaxdet train | eval | predict | summary | demo | configs | convert-config |
convert-dataset | convert-checkpoint``, and the TF OD API's scripts by their own names and
flags (``jaxdet model_main_tf2 | exporter_main_v2 | export_tflite_graph_tf2``).

Every command that reads a config takes ``--config NAME_OR_PATH`` (or a TF OD API
``--pipeline-config FILE``) and any number of ``--set section.field=value`` overrides.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from jaxdet import files
from jaxdet.backends.process import reexec_with_fast_allocator
from jaxdet.cli import errors as cli_errors
from jaxdet.cli.export_command import add_export_parser, cmd_export
from jaxdet.cli.model_args import (
    add_checkpoint_args,
    add_config_args,
    add_model_source_args,
    model_of_args,
    named_config,
)
from jaxdet.cli.staging import staged
from jaxdet.config.loader import ConfigError, load_config, shipped_config_names

DESCRIPTION = ("Train, evaluate, run and export object detectors (SSD, RetinaNet, EfficientDet, "
               "CenterNet, Faster and Mask R-CNN) and a 3D U-Net on JAX, from jaxdet configs or "
               "TF Object Detection API pipeline.config files.")
# the TF OD API's scripts, run by their own names and flags: `jaxdet model_main_tf2 --model_dir=..`
TF_COMMANDS = ("model_main_tf2", "exporter_main_v2", "export_tflite_graph_tf2")
DEMO_TARGET_AP = 0.5
DEMO_TARGET_DICE = 0.9  # unet3d_demo: mean Dice of held-out generated volumes


def _add_progress_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars: a plain line every train.log_every steps and per "
                        "evaluation instead (what a log file gets anyway)")


def _add_distributed_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "many hosts", "one process per host (or per GPU), all started with the same config; "
        "without these, SLURM (srun), TPU pod and Open MPI launches are detected from the "
        "environment, as are JAXDET_COORDINATOR_ADDRESS / JAXDET_NUM_PROCESSES / "
        "JAXDET_PROCESS_ID")
    g.add_argument("--coordinator-address", metavar="HOST:PORT", default=None,
                   help="address of process 0 and a free port it listens on")
    g.add_argument("--num-processes", type=int, default=None, metavar="N",
                   help="number of processes in the run")
    g.add_argument("--process-id", type=int, default=None, metavar="I",
                   help="this process's id, 0 .. N-1 (0 writes logs and prints progress)")
    g.add_argument("--distributed", action="store_true",
                   help="start jax.distributed even if nothing above is set (JAX detects the "
                        "cluster, e.g. a Cloud TPU VM pod slice)")
    g.add_argument("--distributed-timeout", type=int, default=300, metavar="SECONDS",
                   help="how long to wait for every process to join (default 300)")


def _start_distributed(args: argparse.Namespace) -> bool:
    """Start jax.distributed when the flags or the environment ask for it (before any JAX
    work); on processes other than 0 only warnings and errors are logged. True if started."""
    from jaxdet.parallel.distributed import initialize

    started = initialize(args.coordinator_address, args.num_processes, args.process_id,
                         force=args.distributed, timeout_s=args.distributed_timeout)
    if started:
        import jax

        if jax.process_index() != 0:
            logging.getLogger().setLevel(logging.WARNING)
    return started


def _is_main_process() -> bool:
    import jax

    return jax.process_index() == 0


def _version() -> str:
    """The installed package's version (what pip installed from pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxdet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxdet", description=DESCRIPTION,
        epilog="The TF OD API's scripts run with their own flags: jaxdet model_main_tf2 "
               "--pipeline_config_path=FILE --model_dir=DIR ..., jaxdet exporter_main_v2 ..., "
               "jaxdet export_tflite_graph_tf2 ... (each also a command of its own name; "
               "--help lists its flags).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"jaxdet {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a detector (resumes from the workdir's checkpoint)")
    add_config_args(p)
    p.add_argument("--workdir", required=True, help="checkpoints, logs and eval results go here")
    p.add_argument("--no-eval", action="store_true", help="skip evaluation during/after training")
    _add_progress_arg(p)
    _add_distributed_args(p)

    p = sub.add_parser("eval", help="COCO-evaluate a workdir's checkpoint (or a TF zoo model)")
    add_config_args(p, required=False)
    p.add_argument("--workdir", default=None,
                   help="the trained run, or a TF2 zoo model folder (pipeline.config, "
                        "checkpoint/); needed unless --checkpoint is given")
    add_checkpoint_args(p)
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    p.add_argument("--out", default=None,
                   help="output folder (default: WORKDIR/eval/step_N, or step_N_2, _3 ... "
                        "when step_N already holds an evaluation, e.g. training's)")
    p.add_argument("--overwrite", action="store_true",
                   help="write to WORKDIR/eval/step_N even if it holds an evaluation")
    p.add_argument("--watch", action="store_true",
                   help="evaluate each new checkpoint of --workdir as training writes it, until "
                        "its last step (the TF OD API's evaluation side job); may start "
                        "before the training run; a TF model_dir's ckpt-N too, with its "
                        "--pipeline-config")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="with --watch: stop when no new checkpoint appears for this long "
                        "(default 3600)")
    p.add_argument("--poll", type=float, default=10.0, metavar="SECONDS",
                   help="with --watch: how often to look for new checkpoints (default 10)")
    _add_progress_arg(p)

    p = sub.add_parser("predict", help="detect objects in images with a workdir's checkpoint "
                       "(or a TF zoo model)")
    add_model_source_args(p)
    p.add_argument("inputs", nargs="+", metavar="IMAGE_OR_FOLDER",
                   help="image files and/or folders (searched recursively)")
    p.add_argument("--out", required=True, help="output folder: <name>.json + <name>.jpg each")
    p.add_argument("--score-threshold", type=float, default=None,
                   help="keep detections >= this (default: model.post_processing's)")
    p.add_argument("--max-detections", type=int, default=None,
                   help="at most this many per image (default: all the model returns)")
    p.add_argument("--draw-threshold", type=float, default=None,
                   help="draw detections >= this on the <name>.jpg pictures (default 0.3; the "
                        "JSON keeps all >= --score-threshold)")
    p.add_argument("--batch-size", type=int, default=None, help="default: eval.batch_size")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    _add_progress_arg(p)

    add_export_parser(sub)

    p = sub.add_parser("demo", help="generate shapes, train shapes_demo, evaluate, print AP")
    p.add_argument("--workdir", default="runs/demo",
                   help="where the generated data, checkpoints and evaluation go (default "
                        "runs/demo; a finished demo there is shown, not trained again)")
    p.add_argument("--config", default="shapes_demo",
                   help="a config on generated data to train (default shapes_demo; also "
                        "efficientdet_d0_shapes, unet3d_demo: 3D segmentation of volumes)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="A.B=C",
                   help="override a config field (repeatable), e.g. --set train.num_steps=300")
    _add_progress_arg(p)

    p = sub.add_parser("summary", help="parameters, anchors, output shapes and FLOPs of a config")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-flops", action="store_true", help="skip the FLOP count (no compile)")
    p.add_argument("--data", nargs="?", const="train", choices=("train", "eval"), default=None,
                   help="also count the dataset data.train (or data.eval) and how many of its "
                        "boxes no anchor matches (default: on when the config points at COCO/"
                        "VOC/TFRecord files; generated shapes only when asked)")
    p.add_argument("--no-data", action="store_true", help="skip the dataset analysis")

    p = sub.add_parser("convert-config",
                       help="write the native YAML config of a TF OD API pipeline.config")
    p.add_argument("pipeline_config", metavar="FILE", help="the pipeline.config to convert")
    p.add_argument("-o", "--out", required=True, help="the YAML file to write")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="A.B=C",
                   help="override a jaxdet config field in the output (repeatable)")

    p = sub.add_parser("convert-checkpoint",
                       help="import TF OD API (or jaxdet) weights into a new workdir at step 0")
    add_config_args(p)
    p.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="a TF OD API checkpoint (checkpoint/ckpt-0), a jaxdet workdir or a "
                        "PyTorch state dict (.safetensors or .pth)")
    p.add_argument("--checkpoint-format", default="auto",
                   choices=("auto", "tf", "jaxdet", "torch"),
                   help="the --checkpoint's format (default: recognised from the path)")
    p.add_argument("--restore", default="full",
                   choices=("full", "detection", "fitting", "classification"),
                   help="full: every tensor (default); detection: the feature extractor, as "
                        "TF2's fine_tune_checkpoint_type; fitting: every tensor that fits (a "
                        "new class count re-initialises the class predictor); classification: "
                        "the backbone only")
    p.add_argument("--workdir", required=True, help="the new workdir (must hold no checkpoint)")

    sub.add_parser("configs", help="list the shipped configs")

    p = sub.add_parser("convert-dataset",
                       help="convert COCO JSON / VOC <-> TF OD API TFRecord (tf.train.Example)")
    from jaxdet.jobs.convert_dataset import add_arguments

    add_arguments(p)
    return parser


def _print_metrics(metrics: dict, out_dir: Path) -> None:
    from jaxdet.eval.runner import format_metrics

    print(format_metrics(metrics))
    names = ["detections.json", *sorted(p.name for p in out_dir.glob("keypoint_detections_*.json")),
             "metrics.json", "samples.png"]
    written = [str(out_dir / name) for name in names if (out_dir / name).is_file()]
    print(f"wrote {', '.join(written[:-1])} and {written[-1]}" if len(written) > 1
          else f"wrote {''.join(written) or 'nothing'}")


def cmd_train(args: argparse.Namespace) -> int:
    from jaxdet.jobs import runs

    config = named_config(args)
    _start_distributed(args)
    main_process = _is_main_process()
    result = runs.train(config, args.workdir, evaluate=not args.no_eval,
                        progress=main_process and not args.no_progress)
    if main_process:
        print(trained_line(result, args.workdir))
    return 0


def trained_line(result, workdir) -> str:
    """What a train call did, in one line (nothing to do when the run was complete)."""
    if result.steps_run == 0:
        return (f"{workdir} is already complete at step {result.step}; nothing trained "
                "(raise train.num_steps to train longer)")
    rate = (f"; {result.images_per_second:.1f} img/s after a "
            f"{result.compile_seconds:.0f} s compile" if result.images_per_second > 0 else "")
    first = result.step - result.steps_run + 1
    line = f"trained {result.steps_run} steps ({first}-{result.step}){rate}"
    if result.stopped_by:
        line = (f"stopped by {result.stopped_by} after step {result.step}, checkpointed in "
                f"{workdir}/checkpoints ({line}); the same command resumes from it")
    return line


def cmd_eval(args: argparse.Namespace) -> int:
    if args.watch:
        return _watch(args)
    with staged(args):
        return _eval_once(args)


def _eval_once(args: argparse.Namespace) -> int:
    from jaxdet.jobs import runs

    source = model_of_args(args)
    metrics = runs.evaluate(source.config, source.workdir, step=args.step, out_dir=args.out,
                            overwrite=args.overwrite, checkpoint=source.checkpoint,
                            checkpoint_format=args.checkpoint_format,
                            progress=not args.no_progress)
    out = Path(metrics.pop("out_dir"))
    default = out.parent / runs.eval_name(metrics["step"])
    if args.out is None and out != default:
        print(f"{default} already holds an evaluation (kept); this one is in {out} "
              "(--overwrite replaces the first)")
    _print_metrics(metrics, out)
    return 0


def _watch(args: argparse.Namespace) -> int:
    """``jaxdet eval --watch``: ``jobs.eval_watch`` (a jaxdet run, or a TF model_dir's
    ``ckpt-N`` with its --pipeline-config)."""
    from jaxdet.jobs import eval_watch
    from jaxdet.jobs.tf_run import holds_tf_run

    given = [f for f, v in (("--checkpoint", args.checkpoint), ("--step", args.step),
                            ("--out", args.out), ("--overwrite", args.overwrite)) if v]
    if args.workdir is None or given:
        raise ConfigError("--watch follows the checkpoints of a --workdir as they are written"
                          + (f"; it does not take {', '.join(given)}" if given else ""))
    config = named_config(args) if args.config or args.pipeline_config else None
    if holds_tf_run(args.workdir) and not files.exists(files.join(args.workdir, "config.yaml")):
        if config is None:  # a TF model_dir: its ckpt-N, as model_main_tf2 --checkpoint_dir
            raise ConfigError(f"{args.workdir} is a TF OD API model_dir: give its "
                              "--pipeline-config to evaluate its checkpoints")
        results = eval_watch.watch_tf_model_dir(config, args.workdir, args.workdir,
                                                timeout=args.timeout, poll=args.poll,
                                                progress=not args.no_progress,
                                                on_result=print_step_metrics)
    else:
        results = eval_watch.watch_run(args.workdir, config, overrides=args.overrides,
                                       timeout=args.timeout, poll=args.poll,
                                       progress=not args.no_progress,
                                       on_result=print_step_metrics)
    steps = [m["step"] for m in results]
    print(f"evaluated {len(steps)} checkpoint(s)" + (f": steps {', '.join(map(str, steps))}"
                                                     if steps else ""))
    return 0


def print_step_metrics(metrics: dict) -> None:
    print(f"step {metrics['step']}:")
    _print_metrics(metrics, Path(metrics["out_dir"]))


def cmd_predict(args: argparse.Namespace) -> int:
    with staged(args):
        return _predict(args)


def _predict(args: argparse.Namespace) -> int:
    from jaxdet import tasks
    from jaxdet.jobs import runs
    from jaxdet.jobs.predict import predict_images

    source = model_of_args(args)
    config = source.config
    family = tasks.resolve(config)
    predict_files = family.spec.predict_files
    if predict_files is not None:  # another kind of input than images (volumes)
        task, state, step = runs.load_for_inference(
            family, source.workdir, step=args.step, checkpoint=source.checkpoint,
            checkpoint_format=args.checkpoint_format)
        out = args.out or Path(args.workdir or ".") / "predict"
        summary = predict_files(config, task, runs.inference_variables(config, state),
                                args.inputs, out, step=step, batch_size=args.batch_size)
        print(f"predicted {summary.line()}")
        for path, reason in summary.skipped:
            print(f"  skipped {path}: {reason}")
        if not summary.num_images:
            print(f"error: none of the inputs could be read; see "
                  f"{summary.out_dir}/predictions.json", file=sys.stderr)
            return 1
        print(summary.written())
        return 0
    summary = predict_images(config, source.workdir, args.inputs, args.out,
                             checkpoint=source.checkpoint,
                             checkpoint_format=args.checkpoint_format,
                             score_threshold=args.score_threshold,
                             max_detections=args.max_detections, batch_size=args.batch_size,
                             step=args.step, progress=not args.no_progress,
                             **({} if args.draw_threshold is None else
                                {"draw_threshold": args.draw_threshold}))
    print(f"predicted {summary.line()}")
    for path, reason in summary.skipped:
        print(f"  skipped {path}: {reason}")
    if not summary.num_images:
        print(f"error: none of the images could be read; see {summary.out_dir}/predictions.json",
              file=sys.stderr)
        return 1
    print(f"wrote {summary.out_dir}/<name>.json, <name>.jpg and predictions.json")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from jaxdet.jobs import runs

    config = load_config(args.config, args.overrides)
    workdir = Path(args.workdir)
    print(f"jaxdet demo: {config.description}")
    print(f"  generated data and checkpoints under {workdir}/")
    t0 = time.perf_counter()
    result = runs.train(config, workdir, progress=not args.no_progress)
    if result.stopped_by:
        print(trained_line(result, workdir).replace("the same command", "the same demo command"))
        return 0
    out_dir = workdir / "eval" / f"step_{result.step}"
    metrics = json.loads((out_dir / "metrics.json").read_text())
    minutes = (time.perf_counter() - t0) / 60
    if result.steps_run == 0:
        print(f"\n{workdir} already holds the trained demo (step {result.step}); showing its "
              "evaluation (remove the folder to train again)")
    else:
        print(f"\ntrained {result.steps_run} steps in {minutes:.1f} min "
              f"({result.images_per_second:.1f} img/s after a {result.compile_seconds:.0f} s "
              "compile)")
    print(f"held-out Dice ({metrics.get('num_cases', '?')} generated volumes):"
          if "mean_dice" in metrics else
          f"held-out COCO metrics ({metrics.get('num_images', '?')} generated images):")
    _print_metrics(metrics, out_dir)
    key, target = ("mean_dice", DEMO_TARGET_DICE) if "mean_dice" in metrics else (
        "AP", DEMO_TARGET_AP)
    ok = metrics[key] >= target
    print(f"{'mean Dice' if key == 'mean_dice' else key} {metrics[key]:.3f} "
          f"{'>=' if ok else '<'} {target} target: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_summary(args: argparse.Namespace) -> int:
    import tempfile

    from jaxdet import tasks
    from jaxdet.config.schema import ShapesDataConfig

    config = named_config(args)
    family = tasks.resolve(config).spec
    split = None if args.no_data else args.data
    automatic = split is None and not args.no_data
    if automatic and config.data.train is not None and not isinstance(
            config.data.train, ShapesDataConfig):
        split = "train"
    with tempfile.TemporaryDirectory(prefix="jaxdet-summary-") as tmp:  # generated shapes
        summary = family.summary(config, flops=not args.no_flops, data=split, workdir=tmp,
                                 data_required=not automatic)
    print(json.dumps(summary) if args.json else family.format_summary(summary))
    return 0


def cmd_convert_config(args: argparse.Namespace) -> int:
    from jaxdet.config.loader import apply_overrides, validate
    from jaxdet.config.tfod import conversion_yaml, convert_pipeline_config

    conversion = convert_pipeline_config(args.pipeline_config)
    config = validate(apply_overrides(conversion.raw, args.overrides),
                      source=args.pipeline_config)
    out = args.out
    files.makedirs(files.parent(out) or ".")
    files.write_text(out, conversion_yaml(conversion, config))
    for text in conversion.warnings:
        print(f"warning: {text}", file=sys.stderr)
    neck = getattr(config.model, "neck", None)  # faster_rcnn (C4) has none
    parts = config.model.backbone.name + (f" + {neck.name}" if neck is not None else "")
    print(f"wrote {out}: {config.model.type} {parts} "
          f"({len(conversion.same)} TF fields with the same effect, {len(conversion.warnings)} "
          "with a difference: listed at the top of the file)")
    return 0


def cmd_convert_checkpoint(args: argparse.Namespace) -> int:
    from jaxdet.jobs import runs

    config = named_config(args)
    report = runs.import_weights(config, args.workdir, args.checkpoint, restore=args.restore,
                                 checkpoint_format=args.checkpoint_format)
    print(report.line())
    saved = files.join(args.workdir, "config.yaml")
    print(f"wrote {saved} and a checkpoint at step 0: "
          f"jaxdet eval|predict --workdir {args.workdir} ..., or fine-tune with "
          f"jaxdet train --config {saved} --workdir {args.workdir}")
    return 0


def cmd_configs(_: argparse.Namespace) -> int:
    for name in shipped_config_names():
        config = load_config(name)
        print(f"{name:34s} {config.description}")
    return 0


def cmd_convert_dataset(args: argparse.Namespace) -> int:
    from jaxdet.jobs.convert_dataset import run

    return run(args)


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "predict": cmd_predict, "demo": cmd_demo,
            "summary": cmd_summary, "configs": cmd_configs,
            "convert-config": cmd_convert_config, "convert-dataset": cmd_convert_dataset,
            "convert-checkpoint": cmd_convert_checkpoint, "export": cmd_export}


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the console command, not a call from Python
        reexec_with_fast_allocator()
        argv = sys.argv[1:]
    if argv and argv[0] in TF_COMMANDS:  # TF's own flags (absl's syntax), not argparse's
        from importlib import import_module

        return import_module(f"jaxdet.cli.{argv[0]}").main(argv[1:], reexec=False)
    args = _parser().parse_args(argv)
    setup_logging(debug=args.verbose)
    return report_errors(lambda: COMMANDS[args.command](args))


def setup_logging(*, debug: bool = False) -> None:
    """jaxdet's log lines on standard error (INFO, or DEBUG with ``debug``), the chatty
    libraries' above WARNING only."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "jax._src", "orbax"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def report_errors(command: Callable[[], int]) -> int:
    """``command()``'s exit code, with a failure a person can act on as one line on standard
    error (exit 2 for a config error, 1 for others) instead of a traceback."""
    cli_errors.quiet_background_errors()
    try:
        with cli_errors.logs_above_progress_bars():
            return command()
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        line = cli_errors.out_of_memory_line(err) or cli_errors.disk_full_line(err) or err
        print(f"error: {line}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `jaxdet configs | head`: the reader had enough; say nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # disk full, read-only, a file where a folder should be, ...
        print(f"error: {cli_errors.os_error_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
