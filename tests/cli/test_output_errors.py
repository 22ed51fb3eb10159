"""eval, predict and export with a file where their output folder should be: one line naming
the path, exit status 1, the file untouched."""

import pytest

from jaxdet.cli.main import main

pytestmark = pytest.mark.xdist_group("predict")


@pytest.mark.parametrize("command", ["eval", "predict", "export"])
def test_a_file_where_the_output_folder_should_be(trained, tmp_path, capsys, command):
    blocker = tmp_path / "out"
    blocker.write_text("keep me")
    image = next((trained / "data" / "eval" / "images").iterdir())
    extra = [str(image)] if command == "predict" else []
    code = main([command, "--workdir", str(trained), *extra, "--out", str(blocker)])
    err = [x for x in capsys.readouterr().err.replace("\r", "\n").splitlines()
           if x.startswith("error")]
    assert code == 1
    assert len(err) == 1 and str(blocker) in err[0], err
    assert blocker.read_text() == "keep me"
