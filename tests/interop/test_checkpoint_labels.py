"""Where an evaluation of imported weights goes and how it names them: a TF training
checkpoint by its own step, a zoo model's checkpoint by its name, beside the model's folder
(a zoo model) or in the run's folder (model_main_tf2's checkpoints)."""

from __future__ import annotations

import numpy as np

from jaxdet.interop.tf_checkpoint import training_step
from jaxdet.jobs.runs import results_home


class _FakeCheckpoint:
    """What ``training_step`` reads: object paths to keys, and the tensors."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self._tensors = tensors

    def variables(self) -> dict[str, str]:
        return {path: f"{path}/.ATTRIBUTES/VARIABLE_VALUE" for path in self._tensors}

    def read(self, key: str) -> np.ndarray:
        return self._tensors[key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")]


def test_training_step_reads_the_step_or_the_optimizers_iterations():
    assert training_step(_FakeCheckpoint({"step": np.int64(600),
                                          "optimizer/iter": np.int64(7)})) == 600
    assert training_step(_FakeCheckpoint({"optimizer/iter": np.array(1200, np.int64)})) == 1200
    assert training_step(_FakeCheckpoint({"save_counter": np.int64(3)})) is None
    assert training_step(_FakeCheckpoint({"step": np.float32(2.0)})) is None  # not a counter


def test_results_home_of_each_kind_of_checkpoint(tmp_path):
    zoo = tmp_path / "ssd_zoo"
    (zoo / "checkpoint").mkdir(parents=True)
    (zoo / "checkpoint" / "ckpt-0.index").write_bytes(b"")
    run = tmp_path / "model_dir"
    run.mkdir()
    (run / "ckpt-2.index").write_bytes(b"")
    weights = tmp_path / "files" / "d0.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"")
    assert results_home(None, zoo / "checkpoint" / "ckpt-0") == zoo
    assert results_home(None, zoo / "checkpoint" / "ckpt-0.index") == zoo
    assert results_home(None, zoo / "checkpoint") == zoo
    assert results_home(None, run / "ckpt-2") == run  # not its parent folder
    assert results_home(None, weights) == weights.parent
    assert results_home(tmp_path / "workdir", zoo / "checkpoint" / "ckpt-0") == (
        tmp_path / "workdir")
