"""``jaxdet export --format tflite_tf``: TF's SSD TFLite file, as TF's own
``export_tflite_graph_tf2`` and converter make it, compared with the file TF made from the same
checkpoint (``fixtures/tf_tflite_ssd.json``, written by ``make_tf_tflite_fixture.py`` in the TF
peer environment): the same input, the same outputs in the same order under the same names, the
same ``TFLite_Detection_PostProcess`` settings, and the same detections (TF's fast NMS and its
regular NMS). With ``--quantize int8`` the file holds int8 operations calibrated on the
config's training images. Needs TensorFlow (``make test-tf-export``); the refusals that need
none run in ``make test``."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxdet.cli.main import main
from tfod_pipeline import write_pipeline

HAS_TF = importlib.util.find_spec("tensorflow") is not None
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "tf_tflite_ssd.json").read_text())
TF_MODEL_DIR = Path(__file__).parents[1] / "interop" / "fixtures" / "tf_model_dir"
sys.path.insert(0, str(TF_MODEL_DIR.parent))
from tf_fixture_values import rebuild_data  # noqa: E402

needs_tf = pytest.mark.skipif(not HAS_TF, reason="TF's converter: `make test-tf-export`")


def inputs() -> np.ndarray:
    """The fixture's inputs: f32 [3, 1, 64, 64, 3], normalized as MobileNet's preprocessing."""
    pixels = np.random.default_rng(FIXTURE["seed"]).uniform(0, 255, (3, 1, 64, 64, 3))
    return (pixels / 127.5 - 1.0).astype(np.float32)


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory) -> tuple[Path, Path]:
    """(pipeline.config with its TFRecords, the TF model_dir's ckpt-1 that TF's file was made
    from)."""
    root = tmp_path_factory.mktemp("tflite_tf")
    pipeline = write_pipeline(root, fine_tune_placeholder=False)
    checkpoint = rebuild_data(TF_MODEL_DIR, root / "tf_run" / "ckpt-1", "ckpt-1.index")
    shutil.copy(TF_MODEL_DIR / "checkpoint", root / "tf_run" / "checkpoint")
    return pipeline, checkpoint


def export(pipeline: Path, checkpoint: Path, out: Path, *extra: str) -> Path:
    argv = ["export", "--pipeline-config", str(pipeline), "--checkpoint", str(checkpoint),
            "--format", "tflite_tf", "--out", str(out), "--max-detections",
            str(FIXTURE["max_detections"]), *extra]
    assert main(argv) == 0
    return out / "model.tflite"


def postprocess_options(path: Path) -> dict:
    from flatbuffers import flexbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(path.read_bytes(), 0))
    (op,) = [op for op in model.subgraphs[0].operators
             if model.operatorCodes[op.opcodeIndex].customCode == b"TFLite_Detection_PostProcess"]
    return flexbuffers.Loads(bytes(op.customOptions))


def run(path: Path) -> tuple[object, list[list[np.ndarray]]]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,) = interpreter.get_input_details()
    results = []
    for image in inputs():
        interpreter.set_tensor(inp["index"], image)
        interpreter.invoke()
        results.append([interpreter.get_tensor(o["index"])
                        for o in interpreter.get_output_details()])
    return interpreter, results


@needs_tf
@pytest.mark.slow
@pytest.mark.parametrize("nms", ["fast_nms", "regular_nms"])
def test_tflite_tf_is_the_file_tf_makes(tf_run, tmp_path, nms):
    pipeline, checkpoint = tf_run
    path = export(pipeline, checkpoint, tmp_path / "out",
                  *(["--regular-nms"] if nms == "regular_nms" else []))
    want = FIXTURE[nms]
    interpreter, results = run(path)
    (inp,) = interpreter.get_input_details()
    assert {"name": inp["name"], "shape": inp["shape"].tolist(),
            "dtype": np.dtype(inp["dtype"]).name} == want["input"]
    assert [{"name": o["name"], "shape": o["shape"].tolist(), "dtype": np.dtype(o["dtype"]).name}
            for o in interpreter.get_output_details()] == want["outputs"]
    assert interpreter.get_signature_list() == want["signature"]
    runner = interpreter.get_signature_runner()
    assert {k: runner.get_output_details()[k]["name"]
            for k in want["signature_outputs"]} == want["signature_outputs"]
    assert postprocess_options(path) == want["postprocess_options"]
    assert "TFLite_Detection_PostProcess" in {op["op_name"]
                                              for op in interpreter._get_ops_details()}
    for got, expected in zip(results, want["results"], strict=True):
        scores, boxes, num, classes = got
        assert num.tolist() == expected[2] and classes.tolist() == expected[3]
        np.testing.assert_allclose(scores, expected[0], atol=1e-5)
        np.testing.assert_allclose(boxes, expected[1], atol=1e-5)
    signature = json.loads((tmp_path / "out" / "signature.json").read_text())
    assert signature["input"]["name"] == "input" and signature["quantization"] == "none (float32)"
    assert [c["id"] for c in signature["label_map"]] == [1, 2, 3]


@needs_tf
@pytest.mark.slow
def test_tflite_tf_int8_is_calibrated_on_the_training_images(tf_run, tmp_path):
    pipeline, checkpoint = tf_run
    path = export(pipeline, checkpoint, tmp_path / "int8", "--quantize", "int8",
                  "--representative-images", "4")
    float_path = export(pipeline, checkpoint, tmp_path / "float")
    interpreter, results = run(path)
    assert np.int8 in {t["dtype"] for t in interpreter.get_tensor_details()}
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    assert {"QUANTIZE", "DEQUANTIZE", "CONV_2D", "TFLite_Detection_PostProcess"} <= ops
    assert path.stat().st_size < 0.7 * float_path.stat().st_size
    _, floats = run(float_path)
    for got, expected in zip(results, floats, strict=True):
        assert got[2].tolist() == [FIXTURE["max_detections"]]
        assert abs(float(got[0][0, 0]) - float(expected[0][0, 0])) < 0.05  # the top score


def test_tflite_tf_options_are_refused_elsewhere_in_one_line(capsys):
    """``--quantize`` and the other TFLite settings belong to ``--format tflite_tf``."""
    from jaxdet.export.exporter import ExportError
    from jaxdet.jobs.export_job import TfliteOptions, check_tf_postprocess_request

    code = main(["export", "--config", "shapes_demo", "--workdir", "nowhere", "--out", "x",
                 "--quantize", "int8"])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["config error: --max-detections, --regular-nms and --quantize are for --format "
                   "tflite_tf (TF's SSD TFLite file)"]
    with pytest.raises(ExportError, match="takes one image"):
        check_tf_postprocess_request("image_tensor", 2, None, TfliteOptions())
    with pytest.raises(ExportError, match="normalized float32"):
        check_tf_postprocess_request("float_image_tensor", None, None, TfliteOptions())
    with pytest.raises(ExportError, match="must be >= 1"):
        check_tf_postprocess_request("image_tensor", None, None,
                                     TfliteOptions(representative_images=0))


@needs_tf
@pytest.mark.slow
def test_tflite_tf_int8_of_a_network_with_max_pooling_runs(tmp_path):
    """A ResNet's stem (a padded max pooling) quantized to int8: the interpreter's kernels run
    it (as an int8 padding and pooling, TF's converter makes a file that crashes them). Its
    reference kernels: an untrained network's calibration ranges are ones XNNPACK refuses (a
    trained one's it runs: the results page's int8 AP)."""
    from jaxdet.config.loader import load_config
    from jaxdet.jobs.export_job import TfliteOptions, export_model
    from untrained_workdir import untrained_workdir

    config = load_config("shapes_demo", ["data.train.num_images=4", "data.eval.num_images=4"])
    workdir = untrained_workdir(config, tmp_path / "run")
    export_model(config, workdir, tmp_path / "int8", format="tflite_tf",
                 tflite=TfliteOptions(quantize="int8", representative_images=4))
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=str(tmp_path / "int8" / "model.tflite"),
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    out = interpreter.get_signature_runner()(input=np.zeros((1, 128, 128, 3), np.float32))
    assert out["output_3"].shape == (1, 50, 4) and out["output_0"].shape == (1,)
