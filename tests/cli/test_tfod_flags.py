"""The TF OD API scripts' flags as absl reads them: every spelling a team's scripts use gives
the value TF's script would get, and a mistake is one line naming the flag."""

from __future__ import annotations

import pytest

from jaxdet.cli.tfod_flags import Flag, FlagError, HelpRequested, parse_flags

FLAGS = (
    Flag("model_dir", str, None, "where"),
    Flag("num_train_steps", int, None, "steps"),
    Flag("use_tpu", bool, False, "tpu"),
    Flag("record_summaries", bool, True, "summaries"),
)


def parse(*argv: str) -> dict:
    return parse_flags("prog", FLAGS, list(argv))


def test_every_absl_spelling_of_a_value():
    for argv in (["--model_dir=run", "--num_train_steps=7"],
                 ["--model_dir", "run", "--num_train_steps", "7"],
                 ["-model_dir=run", "-num_train_steps", "7"]):
        values = parse(*argv)
        assert (values["model_dir"], values["num_train_steps"]) == ("run", 7)
        assert values["_given"] == {"model_dir", "num_train_steps"}
    defaults = parse()
    assert (defaults["model_dir"], defaults["use_tpu"], defaults["record_summaries"]) == (
        None, False, True)
    assert defaults["verbosity"] == -1 and parse("--v=1")["verbosity"] == 1


def test_booleans_as_absl_takes_them():
    assert parse("--use_tpu")["use_tpu"] is True
    assert parse("--use_tpu=true")["use_tpu"] is True
    assert parse("--use_tpu=False")["use_tpu"] is False
    assert parse("--use_tpu=1", "--nouse_tpu")["use_tpu"] is False  # the last one wins
    assert parse("--norecord_summaries")["record_summaries"] is False
    # a boolean takes no separate value: `--use_side_inputs True` leaves `True` over, which
    # TF's scripts ignore (and jaxdet's name)
    values = parse("--use_tpu", "True", "--model_dir=run")
    assert values["use_tpu"] is True and values["_positional"] == ("True",)
    assert parse("--alsologtostderr", "--logtostderr")["alsologtostderr"] is True


def test_a_flag_file_holds_flags_one_per_line(tmp_path):
    path = tmp_path / "flags.txt"
    path.write_text("# the run's flags\n--model_dir=run\n// steps\n--num_train_steps=9\n\n"
                    "--use_tpu\n")
    values = parse(f"--flagfile={path}", "--num_train_steps=10")
    assert (values["model_dir"], values["num_train_steps"], values["use_tpu"]) == (
        "run", 10, True)


@pytest.mark.parametrize("argv, message", [
    (["--model_directory=run"], "prog: unknown flag --model_directory (did you mean "
                                "--model_dir?)"),
    (["--num_train_steps=ten"], "prog: --num_train_steps=ten: not an integer"),
    (["--use_tpu=maybe"], "prog: --use_tpu=maybe: not a boolean (true or false)"),
    (["--model_dir"], "prog: --model_dir needs a value"),
    (["--nouse_tpu=1"], "prog: --nouse_tpu takes no value"),
    (["--flagfile=/nonexistent/flags.txt"], "prog: --flagfile=/nonexistent/flags.txt: "),
])
def test_mistakes_are_one_line_naming_the_flag(argv, message):
    with pytest.raises(FlagError) as caught:
        parse(*argv)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_help_lists_each_flag_with_what_it_does():
    with pytest.raises(HelpRequested) as caught:
        parse("--model_dir=run", "--helpfull")
    text = caught.value.text
    assert "--num_train_steps\n      steps" in text
    assert "--use_tpu (default: False)\n      tpu" in text
    assert "--alsologtostderr" in text  # the logging flags, on one line
