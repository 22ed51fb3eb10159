"""Which tensors ``train.init_checkpoint.restore`` reads, against TF's own fine-tuning restore
(fixtures/make_tf_restore_sets.py, written by the real TF OD API: a fresh detector restored by
TF2's ``restore_from_objects`` for each ``fine_tune_checkpoint_type``, tensor by tensor). For
SSD MobileNetV2 and FPNLite, RetinaNet-50, EfficientDet-D0, Faster R-CNN ResNet-50 (C4 and
FPN), CenterNet ResNet-50 with keypoints and DeepMAC: from a TF checkpoint, jaxdet's
``detection`` and ``full`` read exactly the tensors TF restores (the ones TF holds and never
applies aside) and ``classification`` the backbone TF's classification checkpoint fills; from a
workdir or a PyTorch file, ``detection`` selects the same variables by module
(``tasks.weights.FEATURE_EXTRACTOR_MODULES``). The values (restored, or left at their
initialization) are checked in tests/tasks/test_weights.py on the MobileNet fixture."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from jaxdet import tasks
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.interop.tf_import import restore_mapping
from jaxdet.interop.tfod_names import tf_unapplied
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.weights import detection_paths

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

TF_SETS = json.loads((FIXTURES / "tf_restore_sets.json").read_text())
NAMES = sorted(k for k in TF_SETS if k != "tensorflow")
PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]

pytestmark = pytest.mark.xdist_group("tf_detectors")


def _fixture(name: str) -> Path:
    whole = FIXTURES / f"tf_{name}"
    return whole if whole.is_dir() else FIXTURES / "tf_names" / f"tf_{name}"


def test_the_fixture_covers_every_meta_architecture():
    kinds = {load_pipeline_config(_fixture(n) / "pipeline.config", PLACEHOLDERS).model.type
             for n in NAMES}
    assert kinds >= {"ssd", "faster_rcnn", "center_net"}
    assert any("deepmac" in n for n in NAMES) and any("fpn_640x640" in n and "faster" in n
                                                      for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_restore_reads_what_tf_restores(name, tmp_path):
    tf = TF_SETS[name]
    fixture = _fixture(name)
    ckpt = TfCheckpoint(rebuild_data(fixture, tmp_path / "ckpt-0"))
    config = load_pipeline_config(fixture / "pipeline.config", PLACEHOLDERS)
    family = tasks.resolve(config)
    model = abstract_build(lambda: family.build_task(seed=0).model)
    mapping = family.tf_name_map(model)
    key_of = ckpt.variables()  # TF object path -> checkpoint key
    keys = sorted(k for k in ckpt.keys() if k.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
                  and not k.startswith("save_counter"))
    # the same architecture as TF's restored detector: the same variable keys
    assert len(keys) == tf["num_keys"]
    assert hashlib.sha256("\n".join(keys).encode()).hexdigest() == tf["keys_sha256"]
    target = {key_of[p]: "/".join(map(str, path)) for p, (path, _) in mapping.items()}
    unapplied = {key_of[p] for p in key_of if tf_unapplied(model)(p)}
    assert set(keys) == set(target) | unapplied

    def restored_by_tf(kind: str) -> set[str]:
        return {keys[i] for start, stop in tf[kind] for i in range(start, stop)}

    for kind in ("detection", "full"):
        restored = restored_by_tf(kind)
        ours = {key_of[p] for p in restore_mapping(mapping, ckpt, kind)}
        assert ours == restored - unapplied, kind
    detection = {target[k] for k in restored_by_tf("detection") if k in target}
    assert detection_paths(model) == detection  # from a workdir or a PyTorch file

    if tf["classification"] is not None:  # the backbone a classification checkpoint fills
        backbone = {target[k] for k in restored_by_tf("classification") if k in target}
        assert backbone == {path for path in target.values() if path.startswith("backbone/")}
