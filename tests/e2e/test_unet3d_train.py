"""The 3D U-Net end to end from its shipped demo config, shrunk (filters 4-8-16, 16^3
patches of 24^3 generated volumes): training lowers the loss and the held-out mean Dice
beats a fresh network's; a run killed half-way resumes to the same weights as an
uninterrupted one; ``jaxdet eval``, ``predict`` (NIfTI and NumPy in, the same format,
spacing and affine out, a truncated file named and skipped) and ``summary`` work on it, and
``jaxdet.load`` gives a Segmenter whose predictions and evaluation equal the commands'."""

from __future__ import annotations

import json

import jax
import nibabel as nib
import numpy as np
import pytest
from PIL import Image

import jaxdet
from jaxdet import tasks
from jaxdet.cli.main import main
from jaxdet.config.loader import dump_config, load_config
from jaxdet.jobs import runs
from jaxdet.tasks.unet3d.volume_io import read_volume, write_volume
from jaxdet.tasks.unet3d.volumes import generated_volume
from tensorboard_events import read_images

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]

STEPS = 300
TINY_UNET3D = [
    "name=tiny_unet3d", "model.filters=[4, 8, 16]", "model.patch_size=[16, 16, 16]",
    "model.sliding_window.batch_size=8",
    "data.train.num_volumes=16", "data.train.shape=[24, 24, 24]",
    "data.eval.num_volumes=3", "data.eval.shape=[24, 24, 24]",
    "train.batch_size=2", f"train.num_steps={STEPS}", f"train.checkpoint_every={STEPS // 2}",
    f"train.eval_every={STEPS}", "train.log_every=1", "train.learning_rate.warmup_steps=5",
    "train.learning_rate.learning_rate_base=0.02", "eval.num_visualizations=1",
    "parallel.data=1",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    config = load_config("unet3d_demo", TINY_UNET3D)
    workdir = tmp_path_factory.mktemp("unet3d") / "run"
    runs.train(config, workdir, progress=False)
    return config, workdir


def _params(config, workdir, step):
    return runs.restore_for_inference(config, workdir, step=step)[1]["params"]


def test_training_lowers_the_loss_and_beats_a_fresh_network(trained, tmp_path):
    config, workdir = trained
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    loss = [r["metrics"]["train/loss"] for r in rows if "train/loss" in r["metrics"]]
    assert len(loss) == STEPS and np.isfinite(loss).all()
    first, last = np.mean(loss[:10]), np.mean(loss[-10:])
    print(f"unet3d e2e loss: first 10 {first:.3f}, last 10 {last:.3f}")
    assert last < 0.75 * first
    metrics = json.loads((workdir / "eval" / f"step_{STEPS}" / "metrics.json").read_text())
    assert metrics["num_cases"] == 3 and metrics["step"] == STEPS
    assert set(metrics) >= {"dice/sphere", "dice/cube", "mean_dice", "per_case"}
    samples = np.asarray(Image.open(workdir / "eval" / f"step_{STEPS}" / "samples.png")
                         .convert("RGB"))
    pictures = read_images(workdir / "tensorboard")  # the same picture, in TensorBoard
    assert list(pictures) == [("eval_samples", STEPS)]
    np.testing.assert_array_equal(pictures["eval_samples", STEPS], samples)
    # the same evaluation of a fresh network: trained must be clearly better
    task = tasks.build_task(config)
    baseline = task.evaluate(None, *task.initial_variables(),
                             tasks.resolve(config).build_source(tmp_path, "eval"))
    print(f"unet3d e2e mean Dice: trained {metrics['mean_dice']:.3f}, fresh "
          f"{baseline['mean_dice']:.3f}")
    assert metrics["mean_dice"] > baseline["mean_dice"] + 0.4


def test_a_killed_run_resumes_to_the_same_weights(trained, tmp_path):
    config, workdir = trained
    halves = tmp_path / "halves"
    runs.train(config, halves, progress=False, evaluate=False, stop_after=STEPS // 2)
    assert runs.restore_for_inference(config, halves)[2] == STEPS // 2
    runs.train(config, halves, progress=False, evaluate=False)
    for a, b in zip(jax.tree.leaves(_params(config, halves, STEPS)),
                    jax.tree.leaves(_params(config, workdir, STEPS)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_cli_eval_predict_and_summary(trained, tmp_path, capsys):
    config, workdir = trained
    assert main(["eval", "--workdir", str(workdir), "--out", str(tmp_path / "eval")]) == 0
    printed = capsys.readouterr().out
    assert "mean Dice" in printed and "sphere" in printed
    again = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    saved = json.loads((workdir / "eval" / f"step_{STEPS}" / "metrics.json").read_text())
    assert again["mean_dice"] == pytest.approx(saved["mean_dice"], abs=1e-6)

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    image, _ = generated_volume((7, 0), (20, 24, 28))
    nifti = write_volume(inputs / "case_a.nii.gz", image[..., 0], (2.0, 1.5, 1.0))
    write_volume(inputs / "case_b.npy", image[..., 0], (1.0, 1.0, 1.0))
    whole = nifti.read_bytes()
    (inputs / "broken.nii.gz").write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "predicted"
    assert main(["predict", "--workdir", str(workdir), str(inputs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 volumes, 1 skipped" in printed and "broken.nii.gz" in printed
    labels, spacing = read_volume(out / "case_a_label.nii.gz")
    assert labels.shape == (20, 24, 28) and spacing == pytest.approx((2.0, 1.5, 1.0))
    assert set(np.unique(labels)) <= {0, 1, 2}
    assert read_volume(out / "case_b_label.npy")[0].shape == (20, 24, 28)
    listing = json.loads((out / "predictions.json").read_text())
    assert [v["file"].rsplit("/", 1)[-1] for v in listing["volumes"]] == [
        "case_a.nii.gz", "case_b.npy"]
    assert listing["skipped"][0]["file"].endswith("broken.nii.gz")
    counts = listing["volumes"][0]["classes"]
    assert counts["sphere"]["voxels"] == int(np.sum(labels == 1))
    assert counts["cube"]["ml"] == pytest.approx(np.sum(labels == 2) * 3.0 / 1000, abs=1e-3)

    (tmp_path / "config.yaml").write_text(dump_config(config))
    assert main(["summary", "--config", str(tmp_path / "config.yaml"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["type"] == "unet3d" and summary["parameters"]["total"] == 21447


def test_the_python_segmenter_equals_the_commands(trained, tmp_path):
    config, workdir = trained
    segmenter = jaxdet.load(workdir)
    assert isinstance(segmenter, jaxdet.Segmenter) and segmenter.step == STEPS
    assert segmenter.class_names == ("sphere", "cube")
    assert repr(segmenter).endswith(f"weights: workdir {workdir} step {STEPS})")
    image, _ = generated_volume((7, 0), (20, 24, 28))
    nifti = write_volume(tmp_path / "case_a.nii.gz", image[..., 0], (2.0, 1.5, 1.0))
    assert main(["predict", "--workdir", str(workdir), str(nifti),
                 "--out", str(tmp_path / "cli")]) == 0
    written = tmp_path / "cli" / "case_a_label.nii.gz"
    expected = read_volume(written)[0]
    listed = json.loads((tmp_path / "cli" / "predictions.json").read_text())["volumes"][0]

    found = segmenter.predict(nifti)
    assert isinstance(found, jaxdet.Segmentation) and found.source == str(nifti)
    np.testing.assert_array_equal(found.labels, expected)
    assert found.spacing == pytest.approx((2.0, 1.5, 1.0))
    assert found.to_dict()["classes"] == listed["classes"]
    assert found.voxels()["sphere"] == int(np.sum(expected == 1)) > 0
    assert found.millilitres()["cube"] == listed["classes"]["cube"]["ml"]
    saved = found.save(tmp_path / "saved.nii.gz")  # as the command writes it
    np.testing.assert_array_equal(read_volume(saved)[0], expected)
    np.testing.assert_allclose(nib.load(saved).affine, nib.load(written).affine)
    # the same voxels as an array with its spacing, and in a list with the file
    as_array, again = segmenter.predict([image[..., 0], nifti], spacing=(2.0, 1.5, 1.0))
    np.testing.assert_array_equal(as_array.labels, expected)
    np.testing.assert_array_equal(again.labels, expected)
    assert as_array.source is None and as_array.to_dict()["file"] is None

    with pytest.raises(ValueError, match=r"expected a volume \[D, H, W\].*\(20, 24\)"):
        segmenter.predict(image[:, :, 0, 0])
    with pytest.raises(ValueError, match=r"got shape \(8, 8, 8, 2\)"):
        segmenter.predict(np.zeros((8, 8, 8, 2), np.float32))
    with pytest.raises(FileNotFoundError, match="absent.nii.gz"):
        segmenter.predict(tmp_path / "absent.nii.gz")
    broken = tmp_path / "broken.nii.gz"
    broken.write_bytes(nifti.read_bytes()[:200])
    with pytest.raises(jaxdet.VolumeReadError, match="broken.nii.gz"):
        segmenter.predict(broken)

    metrics = segmenter.evaluate(tmp_path / "eval", progress=False)
    saved_metrics = json.loads((workdir / "eval" / f"step_{STEPS}" / "metrics.json").read_text())
    assert metrics["mean_dice"] == pytest.approx(saved_metrics["mean_dice"], abs=1e-6)
    assert metrics["step"] == STEPS


def test_predict_from_and_to_a_bucket_equals_local_files(trained, gcs, tmp_path, capsys):
    """Volumes in a bucket (the GCS emulator) predicted into the bucket: the same labels as
    from local files, and the command's output names the bucket's paths."""
    from jaxdet import files

    config, workdir = trained
    inputs = tmp_path / "inputs"
    image, _ = generated_volume((9, 0), (20, 24, 28))
    write_volume(inputs / "case_a.nii.gz", image[..., 0], (2.0, 1.5, 1.0))
    write_volume(inputs / "sub" / "case_b.npz", image[..., 0], (1.0, 1.0, 1.0))
    remote = gcs.upload(inputs, "unet3d/inputs")
    out = remote.rsplit("/", 1)[0] + "/predicted"
    assert main(["predict", "--workdir", str(workdir), str(inputs), "--out",
                 str(tmp_path / "local")]) == 0
    capsys.readouterr()
    assert main(["predict", "--workdir", str(workdir), remote, "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "2 volumes, 0 skipped" in printed and f"wrote {out}/<name>_label" in printed
    for name in ("case_a_label.nii.gz", "case_b_label.npz"):
        got, got_spacing = read_volume(f"{out}/{name}")
        want, want_spacing = read_volume(tmp_path / "local" / name)
        np.testing.assert_array_equal(got, want)
        assert got_spacing == want_spacing
    listed = json.loads(files.read_text(f"{out}/predictions.json"))
    assert [v["file"] for v in listed["volumes"]] == [f"{remote}/case_a.nii.gz",
                                                      f"{remote}/sub/case_b.npz"]
    found = jaxdet.load(workdir).predict(f"{remote}/case_a.nii.gz")
    np.testing.assert_array_equal(found.labels, read_volume(f"{out}/case_a_label.nii.gz")[0])
