"""`jaxdet train` with its output going to a file, as a batch job or `nohup` runs it: no
progress-bar redraws, a "compiling" line before the first step, one plain line every
train.log_every steps and one per evaluation; and the parser's small promises (--version,
every option explained)."""

import os
import subprocess
import sys

import pytest

import jaxdet
from jaxdet.cli.main import _parser, main

pytestmark = pytest.mark.xdist_group("e2e")


def test_train_into_a_log_file_writes_plain_lines(tiny_overrides, tmp_path):
    overrides = [*tiny_overrides, "train.log_every=2", "train.eval_every=3"]
    sets = [arg for item in overrides for arg in ("--set", item)]
    log_file = tmp_path / "train.log"
    with open(log_file, "w") as out:
        subprocess.run([sys.executable, "-m", "jaxdet.cli.main", "train", "--config",
                        "shapes_demo", "--workdir", str(tmp_path / "run"), *sets],
                       stdout=out, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    text = log_file.read_text()
    lines = text.splitlines()
    assert "\r" not in text and not any(line.startswith("train:") for line in lines)
    compiling = [i for i, line in enumerate(lines) if "compiling the train step" in line]
    steps = [line for line in lines if "jaxdet.train: step " in line and "/6" in line]
    assert compiling and compiling[0] < lines.index(steps[0])
    assert [line.split("step ")[1].split()[0] for line in steps] == ["2/6", "4/6", "6/6"]
    assert all("loss " in line and "lr " in line for line in steps)
    assert "img/s " in steps[-1] and "eta " in steps[-1]
    evals = [line for line in lines if "eval: detections of 10 images in" in line]
    assert len(evals) == 2  # after step 3 and at the end
    assert lines[-1].startswith("trained 6 steps (1-6)")


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    # the installed package's version is the one written in jaxdet/__init__.py
    assert capsys.readouterr().out.strip() == f"jaxdet {jaxdet.__version__}"
    parser = _parser()
    assert parser.description.endswith(".")  # a whole sentence, not a cut line
    unexplained = []
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        for action in sub._actions:
            if action.help is None and action.dest != "help":
                unexplained.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not unexplained, unexplained
