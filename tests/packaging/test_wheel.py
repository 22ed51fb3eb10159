"""The wheel works outside the clone: ``python -m build`` makes it; installed into a fresh
virtual environment in another folder (its declared dependencies, and only those, taken from
the test environment's site-packages as a plain path, so nothing of the clone and no package
the test extras happen to bring can be imported), ``jaxdet configs``, ``train`` (with no
warning: JAX's compilation cache finds what it needs), ``predict``, ``export`` and
``jaxdet.load`` work from there, on the configs, native sources and sample photos the wheel
carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
TINY = ["model.backbone.depth_multiplier=0.25", "model.neck.depth=16", "model.head.depth=16",
        "model.neck.max_level=4", "model.anchors.max_level=4",
        "model.head.num_layers_before_predictor=1", "data.resizer.height=64",
        "data.resizer.width=64", "data.train.num_images=8", "data.train.image_size=[64, 64]",
        "data.eval=null", "train.batch_size=4", "train.num_steps=2",
        "train.checkpoint_every=2", "parallel.data=1"]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("e2e")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel built from the clone and installed into a fresh venv outside it: ``{"wheel",
    "python", "jaxdet" (the console script), "env", "cwd"}``."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(root / "dist"), str(REPO)], check=True, capture_output=True, timeout=600)
    wheel = next((root / "dist").glob("jaxdet-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True, timeout=600)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True
                          ).stdout.strip()
    # the declared dependencies, as a plain path entry: the .pth files there (the clone's
    # editable install among them) are not processed, so jaxdet can only come from the wheel
    deps = _declared_dependencies(root / "dependencies")
    Path(site, "zz_test_dependencies.pth").write_text(f"{deps}\n")
    cwd = root / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JAXDET_"))}
    env["JAX_PLATFORMS"] = "cpu"
    return {"wheel": wheel, "python": str(python), "jaxdet": str(venv / "bin" / "jaxdet"),
            "env": env, "cwd": cwd}


def _dependency_closure(names: list[str]) -> set[str]:
    """The distributions ``names`` need, themselves included (requirements whose markers hold
    here, extras followed), as found in this environment."""
    from importlib import metadata

    from packaging.requirements import Requirement

    needed: set[str] = set()
    todo = [(name, frozenset()) for name in names]
    while todo:
        name, extras = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if (key, extras) in needed:
            continue
        needed.add((key, extras))
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": extra}) for extra in (extras or {""}))
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return {key for key, _ in needed}


def _declared_dependencies(folder: Path) -> Path:
    """A folder holding links to what jaxdet's install requires (its pyproject dependencies
    and theirs) in the test environment's site-packages, and nothing else."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    folder.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in _dependency_closure([Requirement(text).name for text in declared]):
        for file in metadata.distribution(name).files or []:
            top = file.parts[0]
            if top != ".." and (site / top).exists() and not (folder / top).exists():
                (folder / top).symlink_to(site / top)
    return folder


def _run(installed: dict, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(list(args), cwd=installed["cwd"], env=env or installed["env"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_wheel_carries_configs_native_sources_and_sample_photos(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    shipped = {p.name for p in (REPO / "src" / "jaxdet" / "configs").glob("*.yaml")}
    assert shipped and {n.rsplit("/", 1)[1] for n in names if n.startswith("jaxdet/configs/")
                        } == shipped
    for needed in ("jaxdet/backends/native/resample.c", "jaxdet/samples/NOTICE.md",
                   "jaxdet/samples/ducky/boxes.json", "jaxdet/samples/photos/dogs.jpg",
                   "jaxdet/config/tfod_protos/descriptors.binpb"):
        assert needed in names, needed
    assert sum(n.startswith("jaxdet/samples/ducky/train/") for n in names) == 5


def test_commands_and_the_python_api_work_from_the_installed_wheel(installed):
    where = _run(installed, installed["python"], "-c",
                 "import jaxdet; print(jaxdet.__file__)")
    assert where.strip().startswith(str(Path(installed["python"]).parents[1]))
    assert "shapes_demo" in _run(installed, installed["jaxdet"], "configs")
    overrides = [a for o in TINY for a in ("--set", o)]
    # as a user's first run: jaxdet's own compilation cache folder, with its size limit
    first_run = {k: v for k, v in installed["env"].items() if k != "JAX_COMPILATION_CACHE_DIR"}
    first_run["JAXDET_CACHE_DIR"] = str(installed["cwd"] / "cache")
    trained = _run(installed, installed["jaxdet"], "train", "--config", "shapes_demo",
                   "--workdir", "run", "--no-progress", *overrides, env=first_run)
    assert "Please install" not in trained and "filelock" not in trained, trained
    assert any((installed["cwd"] / "cache" / "jax").glob("*-atime")), "no program was kept"
    photo = installed["cwd"] / "dogs.jpg"
    _run(installed, installed["python"], "-c",
         "import shutil, jaxdet; shutil.copy(jaxdet.sample_data('photos') / 'dogs.jpg', '.')")
    printed = _run(installed, installed["jaxdet"], "predict", "--workdir", "run", str(photo),
                   "--out", "predicted", "--no-progress")
    assert "predicted 1 image" in printed
    _run(installed, installed["jaxdet"], "export", "--workdir", "run", "--out", "exported")
    assert (installed["cwd"] / "exported" / "signature.json").is_file()
    listed = json.loads((installed["cwd"] / "predicted" / "predictions.json").read_text())
    found = json.loads(_run(installed, installed["python"], "-c",
                            "import jaxdet; d = jaxdet.load('run'); "
                            "print(d.predict('dogs.jpg', score_threshold=0.0).to_json(None))"))
    assert found["detections"] and found["width"] == listed["images"][0]["width"]
