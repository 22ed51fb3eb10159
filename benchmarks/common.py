"""What the benchmarks share: where things are, this machine's description, timing, synthetic
batches, and starting other processes (a benchmark of its own, the TF peer's side).

Timing follows one rule: a comparison is taken in one run, the contenders taking turns
(A B A B ...) over rounds so that a machine's drift (2-core VMs vary by 10-30% over minutes)
falls on all of them alike, and the median is the figure (:func:`by_turns`, :func:`median`).

Nothing here imports jax at module level: a script may set XLA flags or restart itself with
another allocator before jax starts, then call :func:`machine_info`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root (the benchmarks run from there, ``python -m benchmarks...``)."""
SHARED_DATA = ROOT.parent / "shared" / "data"
"""The developers' shared data folder beside the repository (TF OD API configs, records and
photos), where a benchmark looks by default; absent on a user's machine."""
TF_PEER = Path.home() / "tfod-peer"
"""Where the TF OD API peer is built by default (its venv and sources)."""


# --------------------------------------------------------------------------- the machine


def machine_info(devices: bool = True) -> dict[str, Any]:
    """This machine and software: CPU architecture, processor, core count, Python, jax's
    version and the date; with ``devices`` also jax's backend, its first device's kind and the
    device count (this starts jax's backend: a driver that only starts other processes passes
    False)."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": _version("jax"),
        "date": datetime.date.today().isoformat(),
    }
    if devices:
        import jax

        info.update(backend=jax.default_backend(), device=str(jax.devices()[0].device_kind),
                    device_count=jax.device_count())
    return info


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def peak_memory_bytes() -> int | None:
    """The first device's peak memory in use, where the backend reports it (GPU, TPU)."""
    import jax

    return (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")


# --------------------------------------------------------------------------- timing


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()``'s result and the seconds it took (``fn`` must block until its work is done)."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def timed_calls(fn: Callable[[], object], calls: int, warmup: int = 0) -> list[float]:
    """Seconds taken by each of ``calls`` calls of ``fn`` (which must block until done), after
    ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return [timed(fn)[1] for _ in range(calls)]


def by_turns(contenders: Mapping[str, Callable[[], T]], rounds: int,
             report: Callable[[str, T], None] | None = None) -> dict[str, list[T]]:
    """Each contender called once per round, in order, for ``rounds`` rounds: name -> its
    results, round by round. ``report(name, result)`` sees each result as it comes."""
    results: dict[str, list[T]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            results[name].append(run())
            if report is not None:
                report(name, results[name][-1])
    return results


def median(values: Iterable[float]) -> float:
    """The median (of the rounds' figures)."""
    return statistics.median(values)


def latency(times: Sequence[float], batch_size: int) -> dict[str, Any]:
    """The median call of ``times`` (seconds) in ms, the fastest, and images per second at
    ``batch_size`` per call."""
    middle = median(times)
    return {"latency_ms": round(1000 * middle, 1), "min_ms": round(1000 * min(times), 1),
            "images_per_second": round(batch_size / middle, 3), "iters": len(times)}


def report_progress(name: str, result: object) -> None:
    """A :func:`by_turns` report: one JSON line on stderr (stdout keeps the result alone)."""
    print(json.dumps({name: result}), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- synthetic data


def random_images(rng: np.random.Generator, batch_size: int, size: Sequence[int],
                  channels: int = 3) -> np.ndarray:
    """Normal float32 images [B, H, W, C]: a network's input after normalization."""
    return rng.normal(size=(batch_size, *size, channels)).astype(np.float32)


def random_photos(rng: np.random.Generator, batch_size: int, size: Sequence[int]) -> np.ndarray:
    """Uniform uint8 images [B, H, W, 3]: raw pixels, as a user hands them to a detector."""
    return rng.integers(0, 256, (batch_size, *size, 3)).astype(np.uint8)


def image_info(batch_size: int, size: Sequence[int]) -> np.ndarray:
    """[B, 4] float32 ``(height, width, height, width)``: the whole input is image."""
    return np.tile(np.asarray([[*size, *size]], np.float32), (batch_size, 1))


def synthetic_batch(rng: np.random.Generator, batch_size: int, size: Sequence[int],
                    max_boxes: int, num_classes: int, layout: Mapping | None = None) -> dict:
    """A train batch in the loader's layout: random normal images, each with 1..max_boxes
    random boxes (so the step's static-shape target assignment does real work) of random
    classes; the task's other ``layout`` fields (keypoints) random within each box, all
    labelled; ``image_info`` (Faster R-CNN) says the whole input is image."""
    boxes = np.zeros((batch_size, max_boxes, 4), np.float32)
    valid = np.zeros((batch_size, max_boxes), bool)
    for b in range(batch_size):
        n = int(rng.integers(1, max_boxes + 1))
        corner = rng.uniform(0.0, 0.7, (n, 2))
        boxes[b, :n] = np.concatenate([corner, corner + rng.uniform(0.05, 0.3, (n, 2))], 1)
        valid[b, :n] = True
    batch = {
        "images": random_images(rng, batch_size, size),
        "boxes": boxes,
        "classes": rng.integers(0, num_classes, (batch_size, max_boxes)).astype(np.int32),
        "valid": valid,
        "ignore": np.zeros((batch_size, max_boxes), bool),
    }
    if layout and "image_info" in layout:
        batch["image_info"] = image_info(batch_size, size)
    if layout and "keypoints" in layout:
        k = layout["keypoints"].shape[1]
        t = rng.uniform(0.0, 1.0, (batch_size, max_boxes, k, 2))
        low, high = boxes[:, :, None, :2], boxes[:, :, None, 2:]
        batch["keypoints"] = (low + t * (high - low)).astype(np.float32)
        batch["keypoint_visibility"] = np.where(valid[:, :, None], 2, 0).astype(
            np.int32) * np.ones((1, 1, k), np.int32)
    return batch


# --------------------------------------------------------------------------- processes


def last_json(text: str) -> dict | None:
    """The last line of ``text`` that is a JSON object, or None."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_json(cmd: Sequence[str], env: Mapping[str, str] | None = None,
             what: str | None = None) -> dict:
    """Run ``cmd`` and return the last JSON line of its output; a RuntimeError naming ``what``
    (default: the command), its exit status and the end of its stderr when there is none."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False,
                          env=None if env is None else dict(env))
    out = last_json(done.stdout)
    if out is None:
        raise RuntimeError(f"{what or ' '.join(cmd[:4])} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return out


def with_root_on_path(env: Mapping[str, str], *first: str) -> dict[str, str]:
    """``env`` with ``first`` and then the repository's root leading PYTHONPATH, so that a child
    process finds ``benchmarks`` whatever its working directory."""
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join([*first, str(ROOT), *kept])}


def module_command(module: str, *argv: str) -> list[str]:
    """This Python running ``module`` (e.g. a benchmark in a fresh process) with ``argv``."""
    return [sys.executable, "-m", module, *argv]


def add_tf_peer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tf-python`` and ``--tfod-src``: the TF peer's Python and the TF OD API's sources
    (built by the peer's ``setup_tfod.sh``)."""
    parser.add_argument("--tf-python", default=os.environ.get("TFPY"),
                        help="the TF peer's Python (default $TFPY, else "
                             "~/tfod-peer/tfod-venv/bin/python)")
    parser.add_argument("--tfod-src", default=None,
                        help="the TF OD API's sources (default ~/tfod-peer/tfod-src)")


def tf_peer(args: argparse.Namespace, env: Mapping[str, str] | None = None
            ) -> tuple[str, dict[str, str]]:
    """The TF peer's Python and its environment (``env``, default this process's, with Keras 2,
    quiet C++ logs, and the TF OD API's sources and this repository on PYTHONPATH)."""
    python = os.path.expanduser(getattr(args, "tf_python", None)
                                or str(TF_PEER / "tfod-venv" / "bin" / "python"))
    src = os.path.expanduser(getattr(args, "tfod_src", None) or str(TF_PEER / "tfod-src"))
    base = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return python, with_root_on_path({**base, "TF_USE_LEGACY_KERAS": "1",
                                      "TF_CPP_MIN_LOG_LEVEL": "2"}, src)


def tfod_sources(env: Mapping[str, str]) -> Path:
    """The TF OD API's sources in a :func:`tf_peer` environment."""
    return Path(env["PYTHONPATH"].split(os.pathsep)[0])


def peer_command(python: str, peer: str, *argv: str) -> list[str]:
    """``python`` running ``benchmarks.peers.<peer>`` with ``argv``."""
    return [python, "-m", f"benchmarks.peers.{peer}", *argv]
