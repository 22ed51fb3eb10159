"""``model_main_tf2``: the TF OD API's training and evaluation script, run by jaxdet with the
same flags and meanings, so the command lines of a team's scripts work unchanged.

    model_main_tf2 --pipeline_config_path=pipeline.config --model_dir=run --alsologtostderr
    model_main_tf2 --pipeline_config_path=pipeline.config --model_dir=run --checkpoint_dir=run

Without ``--checkpoint_dir`` it trains the pipeline.config in ``--model_dir`` (a jaxdet
workdir: a run stopped there resumes from its last checkpoint; a TF model_dir's run goes on
from its latest ``ckpt-N``, weights, optimizer slots and step; training does not evaluate,
as TF's does not). With ``--checkpoint_dir`` it evaluates that folder's checkpoints as they
appear (a jaxdet run, or a TF model_dir's ``ckpt-N``), writing the results to
``--model_dir``, until the last step or ``--eval_timeout`` seconds without a new one. Also
``jaxdet model_main_tf2 ...`` and ``python -m jaxdet.cli.model_main_tf2 ...``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from jaxdet import files
from jaxdet.cli.tfod_flags import Flag
from jaxdet.cli.tfod_program import require, run_program
from jaxdet.config.loader import ConfigError

PROGRAM = "model_main_tf2"
log = logging.getLogger("jaxdet")

FLAGS = (
    Flag("pipeline_config_path", str, None, "the pipeline.config to train or evaluate "
         "(required)"),
    Flag("model_dir", str, None, "the run's folder (a jaxdet workdir: checkpoints, logs, "
         "TensorBoard events; required); when evaluating, where the results go"),
    Flag("num_train_steps", int, None, "steps to train (default: train_config.num_steps); "
         "when evaluating, the step that ends the evaluation"),
    Flag("eval_on_train_data", bool, False, "accepted: TF2's model_main_tf2 evaluates the "
         "eval input only (the flag has no effect there), and so does jaxdet"),
    Flag("sample_1_of_n_eval_examples", int, None, "evaluate one eval example in every n "
         "(data.eval.sample_1_of_n_examples)"),
    Flag("sample_1_of_n_eval_on_train_examples", int, 5, "accepted: used by TF only with "
         "--eval_on_train_data, which TF2 does not do"),
    Flag("checkpoint_dir", str, None, "evaluate this folder's checkpoints as they appear (a "
         "jaxdet run, or a TF model_dir's ckpt-N), writing the results to --model_dir"),
    Flag("eval_timeout", int, 3600, "seconds without a new checkpoint that end the evaluation"),
    Flag("use_tpu", bool, False, "train on this host's TPUs (refused where JAX finds none)"),
    Flag("tpu_name", str, None, "accepted on a Cloud TPU VM (JAX uses its own chips); a TPU "
         "node reached by name is not supported"),
    Flag("num_workers", int, 1, "processes in the run; above 1 they are found in TF_CONFIG "
         "(as TF's MultiWorkerMirroredStrategy finds them) or the cluster jaxdet detects "
         "(SLURM, TPU pod, Open MPI, JAXDET_* variables)"),
    Flag("checkpoint_every_n", int, 1000, "steps between checkpoints (train.checkpoint_every)"),
    Flag("record_summaries", bool, True, "accepted: jaxdet's training logs its losses and "
         "learning rate, which TF records whatever this says, and no other summaries"),
)
TF_KEEP_CHECKPOINTS = 7  # model_lib_v2.train_loop's checkpoint_max_to_keep


def main(argv: list[str] | None = None, *, reexec: bool = True) -> int:
    """Run ``model_main_tf2`` with ``argv`` (default ``sys.argv[1:]``); the exit code."""
    return run_program(PROGRAM, FLAGS, run, argv, reexec=reexec)


def run(values: dict[str, Any]) -> int:
    """Train, or with ``--checkpoint_dir`` evaluate continuously; see the module docstring."""
    require(values, "model_dir", "pipeline_config_path")
    if values["eval_on_train_data"]:
        log.warning("--eval_on_train_data: TF2's model_main_tf2 evaluates the eval input only "
                    "(the flag has no effect there); jaxdet does the same")
    if values["checkpoint_dir"]:
        for name in ("use_tpu", "tpu_name", "num_workers", "checkpoint_every_n"):
            if name in values["_given"]:
                log.warning("--%s: not used when evaluating (--checkpoint_dir), as in TF", name)
        return evaluate(values)
    for name in ("sample_1_of_n_eval_examples", "eval_timeout"):
        if name in values["_given"]:
            log.warning("--%s: used when evaluating (with --checkpoint_dir) only, as in TF",
                        name)
    return train(values)


def config_of(values: dict[str, Any], overrides: list[str]):
    """The pipeline.config as a jaxdet config, with ``overrides``."""
    from jaxdet.config.tfod import load_pipeline_config

    return load_pipeline_config(values["pipeline_config_path"], overrides)


def train(values: dict[str, Any]) -> int:
    """Train the pipeline.config in ``--model_dir`` (resuming a jaxdet run found there)."""
    import jax

    from jaxdet.cli.main import trained_line
    from jaxdet.jobs import runs

    start_processes(values["num_workers"])
    check_tpu(values, jax.default_backend())
    model_dir = values["model_dir"]  # a TF model_dir's run goes on from its latest ckpt-N
    overrides = [f"train.checkpoint_every={values['checkpoint_every_n']}",
                 f"train.keep_checkpoints={TF_KEEP_CHECKPOINTS}"]
    if values["num_train_steps"] is not None:
        overrides.append(f"train.num_steps={values['num_train_steps']}")
    config = config_of(values, overrides)
    main_process = jax.process_index() == 0
    result = runs.train(config, model_dir, evaluate=False, progress=main_process)
    if main_process:
        print(trained_line(result, model_dir))
    return 0


def start_processes(num_workers: int) -> None:
    """Start ``jax.distributed`` as TF's strategy would find the cluster: with
    ``--num_workers`` above 1, from ``TF_CONFIG`` (MultiWorkerMirroredStrategy's cluster
    spec) or else the cluster jaxdet detects; a TPU pod or SLURM step is detected either way.
    ConfigError when the run's process count is not ``num_workers``."""
    import jax

    from jaxdet.parallel.distributed import initialize, tf_config_processes

    cluster = tf_config_processes() if num_workers > 1 else None
    if cluster is not None:
        initialize(*cluster)
    else:
        initialize(force=num_workers > 1)
    if num_workers > 1 and jax.process_count() != num_workers:
        raise ConfigError(f"--num_workers {num_workers}: the run has {jax.process_count()} "
                          "process(es); start one per worker with TF_CONFIG set (as for TF), "
                          "or under SLURM / mpirun / a TPU pod")
    if jax.process_index() != 0:
        logging.getLogger().setLevel(logging.WARNING)


def check_tpu(values: dict[str, Any], backend: str) -> None:
    """ConfigError when ``--use_tpu`` / ``--tpu_name`` ask for a TPU that JAX does not see."""
    wanted = [f"--{n}" for n in ("use_tpu", "tpu_name") if values[n]]
    if wanted and backend != "tpu":
        raise ConfigError(f"{' '.join(wanted)}: JAX finds no TPU here (its backend is "
                          f"{backend}); run on a Cloud TPU VM, or leave out {wanted[0]} to "
                          f"train on {backend}")
    if values["tpu_name"]:
        log.info("--tpu_name %s: JAX uses this TPU VM's own chips (a TPU VM needs no name)",
                 values["tpu_name"])


def evaluate(values: dict[str, Any]) -> int:
    """Evaluate ``--checkpoint_dir``'s checkpoints as they appear into ``--model_dir``."""
    from jaxdet.cli.main import print_step_metrics
    from jaxdet.jobs import eval_watch

    overrides = []
    if values["sample_1_of_n_eval_examples"] is not None:
        overrides.append(f"data.eval.sample_1_of_n_examples="
                         f"{values['sample_1_of_n_eval_examples']}")
    config = config_of(values, overrides)
    checkpoint_dir, model_dir = values["checkpoint_dir"], values["model_dir"]
    timeout = float(values["eval_timeout"])
    same = _same_folder(checkpoint_dir, model_dir)
    kind = wait_for_checkpoints(checkpoint_dir, timeout)
    if kind is None:
        print(f"no checkpoint appeared in {checkpoint_dir} within {timeout:g} s (--eval_timeout)")
        return 0
    if not same and files.is_url(model_dir):
        raise ConfigError(f"--model_dir {model_dir}: evaluating into a bucket needs "
                          "--checkpoint_dir to be the same folder; give a local --model_dir")
    if kind == "tf":
        if files.is_url(model_dir):
            raise ConfigError(f"--model_dir {model_dir}: the evaluation of a TF model_dir is "
                              "written to a local folder; give a local --model_dir")
        results = eval_watch.watch_tf_model_dir(config, checkpoint_dir, model_dir,
                                                timeout=timeout, on_result=print_step_metrics,
                                                last_step=values["num_train_steps"])
    else:
        results = eval_watch.watch_run(checkpoint_dir, config, timeout=timeout,
                                       on_result=print_step_metrics,
                                       out_root=None if same else model_dir,
                                       last_step=values["num_train_steps"])
    steps = [m["step"] for m in results]
    print(f"evaluated {len(steps)} checkpoint(s)" + (f": steps {', '.join(map(str, steps))}"
                                                     if steps else ""))
    return 0


def _same_folder(a: str, b: str) -> bool:
    if files.is_url(a) or files.is_url(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def wait_for_checkpoints(checkpoint_dir: str, timeout: float, poll: float = 10.0) -> str | None:
    """``"jaxdet"`` (a jaxdet run: ``config.yaml``), ``"tf"`` (TF's ``ckpt-N``) or None when
    neither appears in ``checkpoint_dir`` within ``timeout`` seconds (TF's evaluator waits for
    the trainer the same way)."""
    import time

    from jaxdet.jobs.tf_run import holds_tf_run

    deadline = time.monotonic() + timeout
    said = False
    while True:
        if files.isfile(files.join(checkpoint_dir, "config.yaml")):
            return "jaxdet"
        if holds_tf_run(checkpoint_dir):
            return "tf"
        if time.monotonic() >= deadline:
            return None
        if not said:
            log.info("waiting for checkpoints in %s ...", checkpoint_dir)
            said = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())) or 0.01)


if __name__ == "__main__":
    sys.exit(main())
