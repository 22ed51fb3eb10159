"""TF2 zoo downloads from a real HTTP server on 127.0.0.1 serving a tarball in the zoo's
layout (tests/zoo_server.py): downloaded once into the cache and loaded as the same folder on
disk; no network, an unknown name, a cut-off or foreign tarball: one line each, nothing left
that looks like a model."""

from __future__ import annotations

import numpy as np
import pytest

import jaxdet
from jaxdet.interop.tf_zoo import ZooDownloadError, download_zoo_model
from zoo_server import NAME, closed_port_url, serve_zoo

pytestmark = pytest.mark.xdist_group("tf_detectors")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with serve_zoo(tmp_path_factory.mktemp("zoo")) as served:
        yield served


def test_a_zoo_model_downloads_once_and_loads_as_the_folder_it_unpacks(zoo, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("JAXDET_ZOO_URL", zoo.url)
    monkeypatch.setenv("JAXDET_CACHE_DIR", str(tmp_path / "cache"))
    zoo.requests.clear()
    folder = jaxdet.download_zoo_model(NAME, progress=False)
    assert folder == tmp_path / "cache" / "zoo" / NAME
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                  ) == sorted(p.relative_to(zoo.model).as_posix()
                              for p in zoo.model.rglob("*") if p.is_file())
    assert download_zoo_model(NAME, progress=False) == folder
    assert zoo.requests == [f"/{NAME}.tar.gz"]  # the second call used the cache
    assert [p.name for p in folder.parent.iterdir()] == [NAME]  # no scratch left behind

    photo = np.random.default_rng(0).integers(0, 255, (90, 120, 3), np.uint8)
    mine = jaxdet.load(folder).predict(photo, score_threshold=0.0)
    theirs = jaxdet.load(zoo.model).predict(photo, score_threshold=0.0)
    np.testing.assert_array_equal(mine.boxes, theirs.boxes)
    np.testing.assert_array_equal(mine.scores, theirs.scores)


@pytest.mark.parametrize(("name", "message"), [
    ("no_such_model", r"the model zoo has no such model \(HTTP 404\)"),
    ("cut_off", "not a readable tarball"),
    ("foreign", "holds no pipeline.config with a checkpoint/ckpt-N beside it"),
])
def test_a_bad_download_is_one_line_and_leaves_nothing(zoo, tmp_path, monkeypatch, name,
                                                        message):
    monkeypatch.setenv("JAXDET_ZOO_URL", zoo.url)
    with pytest.raises(ZooDownloadError, match=message) as info:
        download_zoo_model(name, cache_dir=tmp_path / "zoo", progress=False)
    assert "\n" not in str(info.value) and f"{zoo.url}/{name}.tar.gz" in str(info.value)
    assert list((tmp_path / "zoo").iterdir()) == []


def test_no_network_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXDET_ZOO_URL", closed_port_url())
    with pytest.raises(ZooDownloadError, match=r"cannot download http://127\.0\.0\.1:\d+/tf2/"
                       rf"{NAME}\.tar\.gz \(.*\): no network here\?") as info:
        download_zoo_model(NAME, cache_dir=tmp_path / "zoo", progress=False, timeout_s=5)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="not a zoo model name"):
        download_zoo_model("../etc", cache_dir=tmp_path / "zoo")


# under -m exhaustive (55 s cold): make test keeps the download (above) and fine-tuning from
# a TF checkpoint by TF names (tasks/test_weights.py)
@pytest.mark.slow
@pytest.mark.exhaustive
def test_the_few_shot_recipe_fine_tunes_a_downloaded_zoo_model(zoo, tmp_path, monkeypatch):
    """The few-shot notebook's online path: the shipped duck photos fine-tune a model
    downloaded from the zoo (a small input size, a few steps) into a one-class detector."""
    import json

    monkeypatch.setenv("JAXDET_ZOO_URL", zoo.url)
    folder = download_zoo_model(NAME, cache_dir=tmp_path / "zoo", progress=False)
    ducky = jaxdet.sample_data("ducky")
    boxes = json.loads((ducky / "boxes.json").read_text())["images"]
    photos = [ducky / "train" / name for name in boxes]
    result = jaxdet.fine_tune(
        folder, photos, [np.array(b, np.float32) for b in boxes.values()], tmp_path / "ducky",
        class_names=["rubber ducky"], box_format="normalized_yxyx", steps=2, batch_size=2,
        progress=False, overrides=["data.resizer.height=96", "data.resizer.width=96",
                                   "parallel.data=1"])
    assert result.step == 2
    found = result.detector().predict(ducky / "test" / "out1.jpg", score_threshold=0.0)
    assert set(found.class_names) == {"rubber ducky"}
