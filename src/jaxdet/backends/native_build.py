"""Build a shared library from one of jaxdet's native sources, once per machine.

jaxdet ships three native sources as package data (``jaxdet/backends/native/``): the block-cache
allocator shim (C, ``backends.cpu.allocator``), the XLA:CPU kernels (C++, ``backends.cpu.kernels``)
and the input pipeline's image resampler (C, ``jaxdet.data.resample``). None is built when the
package is installed: the first process that wants one compiles it
with the system's compiler into ``$XDG_CACHE_HOME/jaxdet`` (else ``~/.cache/jaxdet``), named by
a hash of the source and of whatever else the binary depends on (the compiler flags, the CPU it
was tuned for, the jax version whose headers it includes). Later processes find the file and
load it. A failed build returns None and leaves no file behind; callers then take their
portable path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/jaxdet``, else ``~/.cache/jaxdet``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxdet"


def cpu_signature() -> bytes:
    """What ``-march=native`` tunes for: the CPU's model and feature flags (a library built on
    one CPU must not be loaded on another that lacks its instructions); pass it as ``key``."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor().encode()
    lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines))).encode()


def find_compiler(env_var: str, names: Sequence[str]) -> str | None:
    """``$env_var`` if set, else the first of ``names`` on PATH, else None."""
    if os.environ.get(env_var):
        return os.environ[env_var]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def cached_library(
    source: Path,
    stem: str,
    compiler: str | None,
    flags: Sequence[str],
    *,
    libraries: Sequence[str] = (),
    key: bytes = b"",
    directory: Path | None = None,
    timeout_s: float = 180.0,
) -> Path | None:
    """The shared library built by ``compiler flags -o LIB source libraries``, in ``directory``
    (default :func:`cache_dir`) as ``{stem}-{machine}-{hash}.so``, where the hash covers the
    source, the flags, the libraries and ``key``. Compiled on the first call; returns None (and
    logs why at debug level) when the source cannot be read, there is no compiler or the build
    fails. Concurrent builds are safe: each writes its own temporary file and renames it into
    place."""
    try:
        code = source.read_bytes()
    except OSError as err:
        log.debug("no %s: %s", stem, err)
        return None
    recipe = "\0".join([*flags, *libraries]).encode()
    digest = hashlib.sha256(code + recipe + key).hexdigest()[:12]
    library = (directory or cache_dir()) / f"{stem}-{platform.machine()}-{digest}.so"
    if library.is_file():
        return library
    if not compiler:
        log.debug("no %s: no compiler", stem)
        return None
    partial = library.with_name(f"{library.name}.{os.getpid()}.tmp")
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([compiler, *flags, "-o", str(partial), str(source), *libraries], check=True,
                       capture_output=True, timeout=timeout_s)
        os.replace(partial, library)  # atomic: concurrent builds never expose a partial file
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", b"") or b""
        log.debug("no %s: building %s failed: %s %s", stem, library, err,
                  detail.decode(errors="replace")[-500:])
        partial.unlink(missing_ok=True)
        return None
    return library
