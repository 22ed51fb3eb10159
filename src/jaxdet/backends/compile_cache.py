"""XLA's compiled programs kept on disk between runs (JAX's persistent compilation cache): a
run that starts again (a resumed or preempted job, another evaluation of the same model)
loads its train step instead of compiling it anew.

Where: ``$JAXDET_COMPILATION_CACHE`` (a folder, or ``off``), else ``$JAXDET_CACHE_DIR/jax``,
else ``~/.cache/jaxdet/jax``; a folder set through JAX itself (``JAX_COMPILATION_CACHE_DIR``)
is left as it is. Programs that compile in under a second are not kept (JAX's default), and
the folder is kept under ``MAX_BYTES`` (the least recently used programs go first).

JAX keeps a program's last use in a ``<key>-atime`` file beside its ``<key>-cache`` file only
when a size limit is set, and its eviction reads that file for every program in the folder on
every write: one program kept by a process without the limit (a run with
``JAX_COMPILATION_CACHE_DIR`` pointing here) and every later write fails with a warning. Such
programs are given a last use of "never" (first to go) when the cache is turned on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("jaxdet")

MAX_BYTES = 4 << 30


def compilation_cache_folder() -> Path | None:
    """The folder programs are kept in (see the module docstring); None when turned off."""
    given = os.environ.get("JAXDET_COMPILATION_CACHE")
    if given is not None:
        return None if given.strip().lower() in ("", "0", "off", "false", "no") else Path(given)
    home = os.environ.get("JAXDET_CACHE_DIR")
    return (Path(home) if home else Path.home() / ".cache" / "jaxdet") / "jax"


def use_compilation_cache() -> Path | None:
    """Turn the persistent compilation cache on for this process (before its first compile;
    calling again changes nothing). Returns the folder in use, or None (turned off, or the
    folder cannot be made: then programs are compiled as without it, with one DEBUG line)."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    folder = compilation_cache_folder()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        log.debug("no compilation cache: %s", err)
        return None
    _date_undated_programs(folder)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return folder


def _date_undated_programs(folder: Path) -> int:
    """Writes a last-use time of 0 for every kept program without one (module docstring);
    returns how many. Best effort: a file another process removes meanwhile is skipped."""
    dated = 0
    for program in folder.glob("*-cache"):
        last_use = program.with_name(program.name.removesuffix("-cache") + "-atime")
        if not last_use.exists():
            try:
                last_use.write_bytes((0).to_bytes(8, "little"))
                dated += 1
            except OSError:
                pass
    if dated:
        log.debug("compilation cache %s: %d programs without a last-use time, dated 0",
                  folder, dated)
    return dated


__all__ = ["MAX_BYTES", "compilation_cache_folder", "use_compilation_cache"]
