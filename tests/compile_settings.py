"""How the suite compiles: XLA:CPU's cheaper settings for the tests, the users' for a canary.

A cold run of the suite spends most of its time in XLA:CPU compiling (train steps of 3-12 s,
thousands of single-op programs of eager code). Two supported XLA:CPU settings cut that by about
a fifth: LLVM at ``-O1`` instead of ``-O2``, and the classic loop emitters instead of the MLIR
fusion emitters. The programs compiled are the same HLO; the numbers agree within every
tolerance of the suite. (``-O0`` is faster still but is not used: XLA:CPU miscompiles there,
with NaN gradients through 3D convolutions.)

``JAXDET_TEST_USERS_COMPILE=1`` runs the whole suite at the users' settings, as a release check
does; :func:`users_compile_env` gives one ``jaxdet`` process the users' settings inside a
normal run.
"""

from __future__ import annotations

import os

FAST_COMPILE_XLA_FLAGS = ("--xla_backend_optimization_level=1",
                          "--xla_cpu_use_fusion_emitters=false")

# XLA_FLAGS as the user set them (an xdist worker inherits the controller's, flags included)
_USERS_XLA_FLAGS = " ".join(flag for flag in os.environ.get("XLA_FLAGS", "").split()
                            if flag not in FAST_COMPILE_XLA_FLAGS)


def use_fast_compile_settings() -> bool:
    """Append the fast-compile flags to ``XLA_FLAGS`` (read when the backend starts; call
    before the first computation). False, and nothing changed, under
    ``JAXDET_TEST_USERS_COMPILE=1``."""
    if os.environ.get("JAXDET_TEST_USERS_COMPILE") == "1":
        return False
    os.environ["XLA_FLAGS"] = " ".join([_USERS_XLA_FLAGS, *FAST_COMPILE_XLA_FLAGS]).strip()
    return True


def users_compile_env() -> dict[str, str]:
    """A copy of ``os.environ`` for a subprocess that compiles as a user's run does: the
    user's own ``XLA_FLAGS``, without the suite's fast-compile flags."""
    env = dict(os.environ)
    if _USERS_XLA_FLAGS:
        env["XLA_FLAGS"] = _USERS_XLA_FLAGS
    else:
        env.pop("XLA_FLAGS", None)
    return env


def compile_settings_line(fast: bool) -> str:
    """The line the suite's header prints about how it compiles."""
    if fast:
        return ("XLA:CPU: the suite's fast-compile settings (" + " ".join(FAST_COMPILE_XLA_FLAGS)
                + "); JAXDET_TEST_USERS_COMPILE=1 compiles as users' runs do")
    return "XLA:CPU: the users' settings (JAXDET_TEST_USERS_COMPILE=1)"
