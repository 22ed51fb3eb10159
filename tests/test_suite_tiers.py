"""The check that keeps each test in its tier (suite_tiers.py): a test outside the slow tier
that starts a process or compiles a large program fails, naming what it did; marked slow, the
same test passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite_tiers import LARGE_COMPILE_S, machine_slowness, tier_violation


def _not_asked() -> float:
    raise AssertionError("the machine's slowness is measured only for a compile over the bound")


def test_what_puts_a_test_in_the_slow_tier():
    assert tier_violation([], (LARGE_COMPILE_S - 0.1, "jit(step)"), _not_asked) is None
    why = tier_violation([], (LARGE_COMPILE_S + 2.5, "jit(traced_step)"), lambda: 1.0)
    assert why and f"compiled jit(traced_step) in {LARGE_COMPILE_S + 2.5:.1f} s" in why
    assert f"(over {LARGE_COMPILE_S:.1f} s)" in why and "@pytest.mark.slow" in why
    why = tier_violation(["python -m jaxdet.cli.main train"], (0.0, ""), _not_asked)
    assert why and "started 1 process(es) (python -m jaxdet.cli.main train)" in why


def test_a_slow_machine_stretches_the_compile_bound():
    """A machine that compiles the reference program twice as slowly allows twice the
    compile time; the measurement is at least 1 and taken once per process."""
    over = (LARGE_COMPILE_S * 1.5, "jit(step)")
    assert tier_violation([], over, lambda: 2.0) is None
    why = tier_violation([], (LARGE_COMPILE_S * 2.5, "jit(step)"), lambda: 2.0)
    assert why and f"(over {2 * LARGE_COMPILE_S:.1f} s)" in why
    slowness = machine_slowness()
    assert slowness >= 1.0 and machine_slowness() == slowness


@pytest.mark.slow
def test_a_quick_test_that_starts_a_process_fails_until_marked_slow(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    pytester.makepyfile(test_tiers="""
        import subprocess, sys
        import pytest

        def test_quick():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        @pytest.mark.slow
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    """)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    exhaustive: all\n")
    result = pytester.runpytest_subprocess("-p", "suite_tiers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*quick-tier test started 1 process(es) (python -c pass)*"])


@pytest.mark.slow
def test_each_ci_phase_says_its_wall_time_and_keeps_its_exit_status(tmp_path):
    """``.ci/phase NAME COMMAND``: what ``make test`` and ``.ci/run`` wrap each phase in."""
    import subprocess

    phase = Path(__file__).parents[1] / ".ci" / "phase"
    log = tmp_path / "phases.txt"
    env = {"PATH": "/usr/bin:/bin", "JAXDET_PHASE_LOG": str(log)}
    done = subprocess.run([str(phase), "lint", "sleep", "0.3"], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0
    word, name, seconds, unit = done.stdout.split()
    assert (word, name, unit) == ("phase", "lint:", "s") and 0.3 <= float(seconds) < 5
    failed = subprocess.run([str(phase), "pytest", "sh", "-c", "exit 3"], capture_output=True,
                            text=True, env=env)
    assert failed.returncode == 3 and failed.stdout.strip().endswith("(failed, exit 3)")
    assert log.read_text().splitlines() == [done.stdout.strip(), failed.stdout.strip()]
