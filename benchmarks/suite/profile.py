"""Where the suite's time goes: runs pytest with the ``suite_profile`` plugin (tests/
suite_profile.py) and prints a JSON summary, or summarizes a folder an earlier run wrote.

    python -m benchmarks.suite.profile --out /tmp/profile -- -n 2 --dist loadgroup
    python -m benchmarks.suite.profile --summarize /tmp/profile

``--cold`` gives the run an empty compilation cache (a fresh clone's first run). The summary:
the wall time and each worker's busy time and last finish (are both cores busy to the end?);
time in setup / call / teardown; XLA compilations (missed the persistent cache) against
programs loaded from it (a program another test or process compiled already) and tracing; the
slowest tests with their compile share; the costliest fixtures; subprocesses by command; the
programs loaded back most often (the same program asked for by several tests or processes);
the CPU the tests used against their wall time, and the tests that waited most (wall minus CPU:
a sleep, a disk, a server; where a second worker per core would help).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, machine_info


def read_records(folder: Path) -> list[dict]:
    """Every test record of every process in ``folder`` (one JSON line each)."""
    records = []
    for path in sorted(folder.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    if any(r["worker"] != "main" for r in records):  # an xdist controller's echo of them
        records = [r for r in records if r["worker"] != "main"]
    return records


def _total(record: dict) -> float:
    return sum(record.get(k, 0.0) for k in ("setup", "call", "teardown"))


def summarize(records: list[dict], top: int = 40) -> dict:
    """The figures described in the module docstring, from :func:`read_records`' list."""
    if not records:
        return {"tests": 0}
    start = min(r["start"] for r in records)
    end = max(r["end"] for r in records)
    workers = collections.defaultdict(lambda: {"tests": 0, "busy_s": 0.0, "last_end_s": 0.0})
    for r in records:
        w = workers[r["worker"]]
        w["tests"] += 1
        w["busy_s"] += _total(r)
        w["last_end_s"] = max(w["last_end_s"], r["end"] - start)
    compiles = [sum(r["compiles"][0] for r in records), sum(r["compiles"][1] for r in records)]
    loads = [sum(r["cache_loads"][0] for r in records),
             sum(r["cache_loads"][1] for r in records)]
    fixtures: dict[str, float] = {}
    for r in records:
        for name, seconds in r["fixtures"].items():
            fixtures[name] = fixtures.get(name, 0.0) + seconds
    by_command: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for r in records:
        for head, seconds in r["subprocesses"]:
            by_command[head][0] += 1
            by_command[head][1] += seconds
    loaded: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    compiled_in: dict[str, set] = collections.defaultdict(set)
    for r in records:
        for name, seconds, kind in r["programs"]:
            if kind == "hit":
                loaded[name][0] += 1
                loaded[name][1] += seconds
            else:
                compiled_in[name].add(r["nodeid"].split("::")[0])
    by_file: dict[str, float] = collections.defaultdict(float)
    for r in records:
        by_file[r["nodeid"].split("::")[0]] += _total(r)
    slowest = sorted(records, key=_total, reverse=True)[:top]
    timed = [r for r in records if "cpu" in r]  # records from before the plugin timed CPU
    waited = sorted(timed, key=lambda r: r["cpu"] - _total(r))[:top]
    return {
        "tests": len(records),
        "wall_s": round(end - start, 1),
        "workers": {k: {kk: round(vv, 1) if isinstance(vv, float) else vv
                        for kk, vv in v.items()} for k, v in sorted(workers.items())},
        "setup_s": round(sum(r.get("setup", 0.0) for r in records), 1),
        "call_s": round(sum(r.get("call", 0.0) for r in records), 1),
        "teardown_s": round(sum(r.get("teardown", 0.0) for r in records), 1),
        "xla_compiles": {"count": compiles[0], "seconds": round(compiles[1], 1)},
        "cache_loads": {"count": loads[0], "seconds": round(loads[1], 1)},
        "tracing_s": round(sum(r["traces"] for r in records), 1),
        "subprocesses": {"count": sum(v[0] for v in by_command.values()),
                         "seconds": round(sum(v[1] for v in by_command.values()), 1),
                         "by_command": {k: [v[0], round(v[1], 1)] for k, v in sorted(
                             by_command.items(), key=lambda kv: -kv[1][1])}},
        "slowest_tests": [
            {"test": r["nodeid"], "s": round(_total(r), 1), "setup_s": r.get("setup", 0.0),
             "compile_s": r["compiles"][1], "compiles": r["compiles"][0],
             "cache_load_s": r["cache_loads"][1], "trace_s": r["traces"],
             "subprocess_s": round(sum(s for _, s in r["subprocesses"]), 1)}
            for r in slowest],
        "cpu_s": round(sum(r["cpu"] for r in timed), 1) if timed else None,
        "waited_most": [{"test": r["nodeid"], "s": round(_total(r), 1), "cpu_s": r["cpu"]}
                        for r in waited],
        "slowest_files": {k: round(v, 1) for k, v in sorted(
            by_file.items(), key=lambda kv: -kv[1])[:top]},
        "costliest_fixtures": {k: round(v, 1) for k, v in sorted(
            fixtures.items(), key=lambda kv: -kv[1])[:top]},
        "programs_loaded_back": {k: [v[0], round(v[1], 1)] for k, v in sorted(
            loaded.items(), key=lambda kv: -kv[1][1])[:top]},
        "programs_compiled_in_several_files": {
            k: len(v) for k, v in sorted(compiled_in.items(), key=lambda kv: -len(kv[1]))
            if len(v) > 1},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for the per-process records")
    parser.add_argument("--summarize", type=Path, help="only summarize this folder")
    parser.add_argument("--cold", action="store_true",
                        help="an empty compilation cache for the run")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's own arguments")
    args = parser.parse_args(argv)
    folder = args.summarize
    wall = None
    if folder is None:
        folder = args.out or Path(tempfile.mkdtemp(prefix="suite_profile_"))
        folder.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, JAXDET_SUITE_PROFILE=str(folder))
        if args.cold:
            env["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax_cache_")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_profile",
                        *args.pytest_args], cwd=ROOT, env=env, check=False)
        wall = round(time.perf_counter() - started, 1)
    summary = summarize(read_records(folder), args.top)
    print(json.dumps({"machine": machine_info(devices=False), "folder": str(folder),
                      "pytest_wall_s": wall, **summary}, indent=1))


if __name__ == "__main__":
    main()
