"""Where "are we on the CPU?" is asked: only in ``backends/`` (model, core, data and job code
ask ``backends.dispatch``), so a CPU-only branch cannot creep back into a family or a layer
above. A scan of the package's source, which a new ``jax.default_backend() == "cpu"`` outside
``backends/`` fails."""

from __future__ import annotations

import re
from pathlib import Path

import jax

import jaxdet
from jaxdet.backends import dispatch

PACKAGE = Path(jaxdet.__file__).parent
# a comparison with the backend's name, or a platform string compared directly
CPU_QUESTION = re.compile(
    r"default_backend\(\)\s*[!=]=|[!=]=\s*jax\.default_backend\(\)|\.platform\s*[!=]=\s*['\"]cpu")


def _questions_outside_backends() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "backends":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if CPU_QUESTION.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_the_pattern_catches_the_ways_the_question_is_written():
    for line in ('if jax.default_backend() == "cpu":', "on = jax.default_backend() != 'cpu'",
                 'if "cpu" == jax.default_backend():', 'd.platform == "cpu"'):
        assert CPU_QUESTION.search(line), line
    assert not CPU_QUESTION.search('{"backend": jax.default_backend()}')


def test_only_backends_ask_whether_jax_runs_on_the_cpu():
    assert _questions_outside_backends() == []


def test_dispatch_answers_for_this_process():
    assert dispatch.on_cpu() == (jax.default_backend() == "cpu")
    assert dispatch.default_conv3d_lowering() == ("depth_stacked" if dispatch.on_cpu()
                                                  else "native")
    assert set(dispatch.CONV3D_LOWERINGS) == {"native", "depth_stacked"}
