"""Build a shared library from one of jaxdet's native sources, once per machine.

jaxdet ships three native sources as package data (``jaxdet/backends/native/``): the block-cache
allocator shim (C, ``backends.cpu.allocator``), the XLA:CPU kernels (C++, ``backends.cpu.kernels``)
and the input pipeline's image resampler (C, ``resample.c``). None is built when the
package is installed: the first process that wants one compiles it
with the system's compiler into ``$XDG_CACHE_HOME/jaxdet`` (else ``~/.cache/jaxdet``), named by
a hash of the source and of whatever else the binary depends on (the compiler flags, the CPU it
was tuned for, the jax version whose headers it includes). Later processes find the file and
load it. A failed build returns None and leaves no file behind; callers then take their
portable path, and call :func:`report_fallback`: one WARNING, once per machine, names every
part that falls back (no compiler, or a failed build) and what that costs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

NATIVE_DIR = Path(__file__).resolve().parent / "native"


@dataclasses.dataclass(frozen=True)
class NativePart:
    """One of jaxdet's native sources: how it is built and what runs without it."""

    stem: str  # the library's name in the cache (``{stem}-{machine}-{hash}.so``)
    source: str  # its file in ``backends/native/``
    compiler_variable: str  # CC or CXX
    compiler_names: tuple[str, ...]  # looked up on PATH when the variable is unset
    opt_out: str  # the environment variable that turns it off ("0")
    what: str
    fallback: str  # what runs instead, and what that costs
    glibc_only: bool = False

    @property
    def language(self) -> str:
        return "C++" if self.compiler_variable == "CXX" else "C"


PARTS = (
    NativePart("block_cache", "block_cache.c", "CC", ("cc", "gcc", "clang"),
               "JAXDET_BLOCK_CACHE", "the block cache for XLA:CPU's step buffers",
               "none, CPU train steps up to 1.25x slower (each step's buffers faulted in and "
               "zeroed again)", glibc_only=True),
    NativePart("cpu_kernels", "cpu_kernels.cc", "CXX", ("c++", "g++", "clang++"),
               "JAXDET_CPU_KERNELS", "jaxdet's XLA:CPU kernels",
               "the portable jnp code, CPU train steps about 1.35x slower and CPU predict up to "
               "1.3x"),
    NativePart("resample", "resample.c", "CC", ("cc", "gcc", "clang"),
               "JAXDET_NATIVE_RESAMPLE", "the input pipeline's image resampler",
               "numpy, resizing an image 30-45x slower (the data loader can then hold the "
               "training back)"),
)
_PARTS = {part.stem: part for part in PARTS}
_why: dict[str, str] = {}  # stem -> why its last build in this process failed
_failed: dict[str, str] = {}  # stem -> why, for the parts reported as falling back
_reported: set[str] = set()  # marker names this process has dealt with


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


def compiler(stem: str) -> str | None:
    """The compiler that builds the part ``stem`` (one of :data:`PARTS`): its ``$CC`` /
    ``$CXX`` if set, else the first of its usual names on PATH, else None."""
    part = _PARTS[stem]
    return find_compiler(part.compiler_variable, part.compiler_names)


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
        _why[stem] = f"its source is missing: {err}"
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
        _why[stem] = f"{compiler} failed to build it"
        return None
    return library


def _applies(part: NativePart, environ) -> bool:
    if environ.get(part.opt_out, "1") == "0":  # turned off on purpose: nothing to report
        return False
    return not part.glibc_only or (platform.system() == "Linux"
                                   and platform.libc_ver()[0] == "glibc")


def _no_compiler(part: NativePart) -> str | None:
    """Why ``part`` has no compiler (None when it has one)."""
    program = compiler(part.stem)
    if not program:
        return f"no {part.language} compiler found"
    if shutil.which(program) is None:
        return f"no {part.language} compiler: {part.compiler_variable}={program} not found"
    return None


def fallbacks(directory: Path | None = None) -> dict[str, str]:
    """{stem: why} of the parts that run their slower fallback on this machine: those reported
    by :func:`report_fallback` in this process, and those with no usable compiler and nothing
    built for them in ``directory`` (default :func:`cache_dir`). Parts turned off by their
    variable, or that do not apply here (the block cache off glibc Linux), are left out."""
    folder = directory or cache_dir()
    found: dict[str, str] = {}
    for part in PARTS:
        if not _applies(part, os.environ):
            continue
        if part.stem in _failed:
            found[part.stem] = _failed[part.stem]
        elif (why := _no_compiler(part)) and not any(
                folder.glob(f"{part.stem}-{platform.machine()}-*.so")):
            found[part.stem] = why
    return found


def fallback_message(found: dict[str, str], marker_dir: Path) -> str:
    """The one line that says which parts fall back, why, and what it costs."""
    parts = "; ".join(f"{_PARTS[stem].what} ({why}) -> {_PARTS[stem].fallback}"
                      for stem, why in found.items())
    languages = sorted({_PARTS[stem].language for stem in found})
    variables = " / ".join(sorted({_PARTS[stem].compiler_variable for stem in found}))
    failed = any("failed" in why for why in found.values())
    return (f"jaxdet could not build {len(found)} of its native parts, slower code runs "
            f"instead: {parts}. Install a {' and a '.join(languages)} compiler (gcc / g++ or "
            f"clang) or set {variables}{' (jaxdet -v shows the build errors)' if failed else ''}"
            f"; shown once per machine (marker in {marker_dir}).")


def report_fallback(stem: str, directory: Path | None = None) -> None:
    """Say that the part ``stem`` falls back (its build in this process failed): one WARNING
    naming every part that falls back on this machine (:func:`fallbacks`) and what it costs,
    logged once per machine. A marker file in ``directory`` (default :func:`cache_dir`),
    named by a hash of the native sources, their compilers and the parts that fall back,
    keeps later processes quiet; a new compiler, new sources or another part failing make a
    new marker, and the warning is shown again."""
    _failed[stem] = _no_compiler(_PARTS[stem]) or _why.get(stem, "its build failed")
    folder = directory or cache_dir()
    found = fallbacks(folder)
    if not found:  # turned off, or not for this platform
        return
    digest = hashlib.sha256(platform.machine().encode())
    for part in PARTS:
        try:
            digest.update((NATIVE_DIR / part.source).read_bytes())
        except OSError:
            pass
        digest.update(f"\0{part.stem}\0{compiler(part.stem)}\0{part.stem in found}".encode())
    marker = folder / f"fallback-warned-{digest.hexdigest()[:16]}"
    if marker.name in _reported:
        return
    _reported.add(marker.name)
    message = fallback_message(found, folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(marker, "x") as out:  # exclusive: of two processes at once, one warns
            out.write(message + "\n")
    except FileExistsError:
        log.debug("%s (warned before: %s)", message, marker)
        return
    except OSError:
        pass  # an unwritable cache: warn in every process rather than never
    log.warning(message)
