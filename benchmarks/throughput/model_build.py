"""Model initialization: how long building a model and its train state takes in a fresh
process, and how many XLA programs each needs; prints one JSON object.

    python -m benchmarks.throughput.model_build --config retinanet_resnet50_fpn_640 \\
        faster_rcnn_resnet50_v1_fpn_640 efficientdet_d0 ssd_mobilenet_v2_320 --rounds 3

Each measurement is a fresh process (what ``jaxdet train`` starts from: jax imported, no
program compiled yet) with the persistent compilation cache off, so every program it needs is
compiled: ``model_build`` is the family's builder and the model's initial variables on the
device; ``state_init`` the train state (optimizer slots, EMA copy, loss scale) from them, as
the train job makes it. ``programs`` counts the XLA programs lowered for each, ``names`` the
model build's. A config is a shipped config's name or a YAML / pipeline.config file;
``--set`` overrides go to every config.

``--vs-src DIR`` times a second jaxdet source tree (``DIR/src``, e.g. a ``git worktree`` of
an earlier commit) by turns with this one, round by round; the median over rounds is the
figure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

from benchmarks import common


def measure(config_name: str, overrides: list[str]) -> dict:
    """This process builds ``config_name``'s model and train state (see the module docstring)."""
    import jax

    from jaxdet import tasks
    from jaxdet.config.loader import load_config
    from jaxdet.train import build as train_build
    from jaxdet.train.step import init_train_state

    lowered: list[str] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: lowered.append(kw.get("fun_name", "?"))
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" else None)
    config = load_config(config_name, overrides)
    family = tasks.resolve(config)
    jax.devices()  # the backend's start is not the model's
    t0 = time.perf_counter()
    task = family.build_task()
    jax.block_until_ready(task.initial_variables())
    build_s, build_programs = time.perf_counter() - t0, len(lowered)
    tx, _ = train_build.build_optimizer(config.train)
    t0 = time.perf_counter()
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=train_build.build_loss_scale(config))
    jax.block_until_ready(state)
    return {"model_build_s": round(build_s, 3), "model_build_programs": build_programs,
            "model_build_names": dict(collections.Counter(lowered[:build_programs])),
            "state_init_s": round(time.perf_counter() - t0, 3),
            "state_init_programs": len(lowered) - build_programs}


def _fresh_process(config: str, overrides: list[str], src: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["JAXDET_COMPILATION_CACHE"] = "off"
    env = common.with_root_on_path(env, *([src] if src else []))
    return common.run_json(
        common.module_command("benchmarks.throughput.model_build", "--serve", config,
                              *[x for s in overrides for x in ("--set", s)]),
        env=env, what=f"building {config}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["efficientdet_d0"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vs-src", default=None,
                        help="another jaxdet source tree, timed by turns with this one")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        out = measure(args.serve, args.overrides)
        print(json.dumps(out))
        return out
    vs_src = str(Path(args.vs_src).resolve() / "src") if args.vs_src else None
    sides = {"this": None, **({"vs": vs_src} if vs_src else {})}
    contenders = {f"{config}|{side}": (lambda config=config, src=src: _fresh_process(
                      config, args.overrides, src))
                  for config in args.config for side, src in sides.items()}
    runs = common.by_turns(contenders, args.rounds, report=common.report_progress)
    result: dict = {"benchmark": "model_build", "rounds": args.rounds, "configs": {}}
    for key, rounds in runs.items():
        config, side = key.split("|")
        result["configs"].setdefault(config, {})[side] = {
            "model_build_s": common.median(r["model_build_s"] for r in rounds),
            "model_build_programs": rounds[-1]["model_build_programs"],
            "model_build_names": rounds[-1]["model_build_names"],
            "state_init_s": common.median(r["state_init_s"] for r in rounds),
            "state_init_programs": rounds[-1]["state_init_programs"],
            "rounds_model_build_s": [r["model_build_s"] for r in rounds]}
    result["machine"] = common.machine_info(devices=False)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
