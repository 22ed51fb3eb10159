"""One input, one behaviour, from the command line and from Python: a workdir that does not
exist is named in the same line by both; a misspelt config name gets its close shipped names,
not the whole list; ``overrides`` given as one str is refused before anything runs; a model
loaded without weights says, in the log and in its repr, that it is untrained."""

from __future__ import annotations

import logging
import re

import pytest

import jaxdet
from jaxdet.cli.main import main
from jaxdet.config.loader import ConfigError, apply_overrides


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("given", ["runs/missing", "./missing", "{tmp}/runs/missing"])
def test_a_missing_workdir_reads_the_same_from_the_command_and_python(given, tmp_path,
                                                                      monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    given = given.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as python:
        jaxdet.load(given)
    message = str(python.value)
    assert message == f"workdir not found: {given}"
    assert isinstance(python.value, FileNotFoundError)
    for call in (lambda: jaxdet.load(workdir=given),
                 lambda: jaxdet.load("shapes_demo", workdir=given)):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            call()
    for command in (["predict", "--workdir", given, "photo.jpg", "--out", "out"],
                    ["predict", "--config", "shapes_demo", "--workdir", given, "photo.jpg",
                     "--out", "out"],
                    ["eval", "--workdir", given],
                    ["export", "--workdir", given, "--out", "exported"]):
        assert main(command) == 2
        assert _one_line(capsys) == f"config error: {message}"
    assert not (tmp_path / "out").exists() and not (tmp_path / "exported").exists()


def test_a_config_name_is_not_a_workdir_for_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--workdir", "shapes_demo", "photo.jpg", "--out", "out"]) == 2
    assert _one_line(capsys) == ("config error: workdir not found: shapes_demo; shapes_demo is "
                                 "a shipped config: give it as --config shapes_demo (with "
                                 "--checkpoint for its weights)")


def test_a_misspelt_config_name_suggests_the_close_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    want = ("'efficientdet_do' is neither a shipped config nor an existing file or folder; did "
            "you mean efficientdet_d0, efficientdet_d1, efficientdet_d2? (`jaxdet configs` lists "
            "the shipped configs)")
    with pytest.raises(ConfigError) as python:
        jaxdet.load("efficientdet_do")
    message = str(python.value)
    assert message == want  # the close names, not all 35
    assert main(["summary", "--config", "efficientdet_do", "--no-flops", "--no-data"]) == 2
    assert _one_line(capsys) == f"config error: {message}"
    assert main(["predict", "--config", "efficientdet_do", "--checkpoint", "ckpt",
                 "photo.jpg", "--out", "out"]) == 2
    assert _one_line(capsys) == f"config error: {message}"


def test_overrides_as_one_str_are_refused(tmp_path):
    want = ("overrides is a list of 'section.field=value' strings, got the str "
            "'eval.batch_size=2': write overrides=['eval.batch_size=2']")
    calls = {
        "load": lambda: jaxdet.load("shapes_demo", overrides="eval.batch_size=2"),
        "fit": lambda: jaxdet.fit("shapes_demo", tmp_path / "fit", overrides="eval.batch_size=2"),
        "fine_tune": lambda: jaxdet.fine_tune("shapes_demo", [], [], tmp_path / "tuned",
                                              checkpoint=tmp_path,
                                              overrides="eval.batch_size=2"),
        "watch_and_evaluate": lambda: jaxdet.watch_and_evaluate(
            tmp_path / "watched", overrides="eval.batch_size=2", timeout=0.01, poll=0.01),
        "apply_overrides": lambda: apply_overrides({}, "eval.batch_size=2"),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError) as error:
            call()
        assert str(error.value) == want, name
    assert not any(tmp_path.iterdir())  # nothing written, nothing waited for


def test_a_model_without_weights_says_it_is_untrained(tiny_overrides, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet"):
        detector = jaxdet.load("shapes_demo", overrides=tiny_overrides)
    said = [r for r in caplog.records if r.name == "jaxdet" and r.levelno == logging.WARNING]
    assert len(said) == 1, [r.getMessage() for r in said]
    line = said[0].getMessage()
    assert "\n" not in line and "untrained (fresh initialization)" in line
    assert "checkpoint=" in line and "workdir=" in line
    h, w = detector.input_size
    assert repr(detector) == (f"Detector(ssd, 3 classes, input {h}x{w}, weights: untrained "
                              "(fresh initialization))")
    assert detector.weights == "untrained (fresh initialization)" and detector.step == 0
