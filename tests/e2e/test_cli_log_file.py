"""The parser's small promises: --version, every option explained. (``jaxdet train`` with its
output going to a file is checked with the other commands in test_cli.py.)"""

import pytest

import jaxdet
from jaxdet.cli.main import _parser, main


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
