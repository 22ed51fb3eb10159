"""A pipeline.config is read against the TF OD API's own messages (the vendored ``.proto``
files): TF's parse errors as one line each, and TF's defaults for every field jaxdet reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

import jaxdet
from jaxdet.cli.main import main
from jaxdet.config.loader import ConfigError
from jaxdet.config.tfod import convert_pipeline_config, load_pipeline_config
from jaxdet.config.tfod_proto import message_descriptor, pipeline_message

ROOT = Path(__file__).resolve().parents[2]
PETS = ROOT / "examples" / "pipeline_configs" / "ssd_mobilenet_v2_fpnlite_320_pets.config"
TFOD_CONFIGS = ROOT.parent / "shared" / "data" / "tfod" / "configs"
ZOO = sorted(TFOD_CONFIGS.glob("*.config"))
needs_zoo = pytest.mark.skipif(not ZOO, reason="needs ../shared/data/tfod/configs")

# (what the pets config says, the typo, what the one line must say after "file:line:col: ")
TYPOS = [
    ("num_classes: 37", "num_clases: 37",
     "model.ssd.num_clases: TF's Ssd has no field 'num_clases'; did you mean 'num_classes'?"),
    ("num_steps: 20000", "num_step: 20000", "train_config.num_step: TF's TrainConfig has no "
     "field 'num_step'; did you mean 'num_steps'?"),
    ("train_config {", "train_confg {", "train_confg: TF's TrainEvalPipelineConfig has no "
     "field 'train_confg'; did you mean 'train_config'?"),
    ("ssd {", "ssdd {", "model.ssdd: TF's DetectionModel has no field 'ssdd'; did you mean "
     "'ssd'?"),
    ("random_horizontal_flip {", "random_horizontal_flipp {",
     "train_config.data_augmentation_options.random_horizontal_flipp: TF's PreprocessingStep "
     "has no field 'random_horizontal_flipp'; did you mean 'random_horizontal_flip'?"),
    ("mean: 0.0 stddev: 0.01", "mean: 0.0 sttdev: 0.01",
     "initializer.random_normal_initializer.sttdev: TF's RandomNormalInitializer has no field "
     "'sttdev'; did you mean 'stddev'?"),
    ("num_classes: 37", "num_classes: 37 colour_space: RGB",
     "model.ssd.colour_space: TF's Ssd has no field 'colour_space' (its fields: "),
    ("activation: RELU_6", "activation: RELU6",
     "conv_hyperparams.activation: RELU6 is not a value of TF's Hyperparams.Activation; did you "
     "mean 'RELU_6'?"),
    ("score_converter: SIGMOID", "score_converter: SIGMOD",
     "model.ssd.post_processing.score_converter: SIGMOD is not a value of TF's "
     "PostProcessing.ScoreConverter; did you mean 'SIGMOID'?"),
    ("batch_size: 32", "batch_size: 3.5", "train_config.batch_size: expected an integer, "
     "found 3.5"),
    ("batch_size: 32", 'batch_size: "32"', "train_config.batch_size: expected an integer, "
     'found "32"'),
    ("min_depth: 16", "min_depth: 1.5", "model.ssd.feature_extractor.min_depth: expected an "
     "integer, found 1.5"),
    ("matched_threshold: 0.5", "matched_threshold: high",
     "matcher.argmax_matcher.matched_threshold: expected a number, found high"),
    ("num_steps: 20000", "num_steps: -5", "train_config.num_steps: -5 is out of the range of "
     "TF's field"),
]


def _typo(tmp_path: Path, old: str, new: str) -> Path:
    text = PETS.read_text()
    assert old in text
    path = tmp_path / "pipeline.config"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(("old", "new", "said"), TYPOS, ids=[t[1][:24] for t in TYPOS])
def test_a_typo_is_one_line_naming_file_line_column_and_field(tmp_path, old, new, said):
    path = _typo(tmp_path, old, new)
    with pytest.raises(ConfigError) as err:
        load_pipeline_config(path)
    message = str(err.value)
    assert "\n" not in message
    line = path.read_text().splitlines().index(
        next(x for x in path.read_text().splitlines() if new.split("\n")[-1].strip() in x)) + 1
    assert message.startswith(f"{path}:{line}:"), message
    assert said in message, message


def test_the_cli_and_the_python_api_say_the_same_line(tmp_path, capsys):
    path = _typo(tmp_path, "num_classes: 37", "num_clases: 37")
    assert main(["summary", "--pipeline-config", str(path), "--no-flops", "--no-data"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].endswith("did you mean 'num_classes'?")
    for call in (lambda: jaxdet.load(path), lambda: jaxdet.fit(path, tmp_path / "run")):
        with pytest.raises(ConfigError, match=r"model\.ssd\.num_clases: .*did you mean "
                                              r"'num_classes'\?$"):
            call()
    assert not (tmp_path / "run").exists()


def test_a_syntax_error_names_file_line_and_column(tmp_path):
    path = _typo(tmp_path, "fixed_shape_resizer {", "fixed_shape_resizer: 5 {")
    with pytest.raises(ConfigError, match=r"pipeline\.config:\d+:\d+: expected a field name"):
        load_pipeline_config(path)


def _without_scalars(message, keep: set[str]) -> None:
    """Clear every scalar field (recursively) but those named in ``keep``."""
    for fd, value in list(message.ListFields()):
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            continue
        if fd.message_type is not None:
            for item in (value if fd.is_repeated else [value]):
                _without_scalars(item, keep)
        elif fd.name not in keep:
            message.ClearField(fd.name)


# what a config must say for jaxdet to build it (each a one-line error otherwise: TF's message
# has no default that builds a model, or its default is one jaxdet refuses by name)
REQUIRED = {"num_classes", "height", "width", "min_dimension", "max_dimension", "type",
            "input_path", "label_map_path", "num_steps", "keypoint_class_name", "task_name",
            "keypoint_label_map_path", "class_name", "alpha", "beta", "op", "num_filters",
            "num_iterations", "fine_tune_checkpoint_version", "load_instance_masks",
            "mask_type", "scales", "aspect_ratios", "initial_crop_size", "maxpool_kernel_size",
            "maxpool_stride", "score_converter", "scale", "center"}


@needs_zoo
def test_every_default_jaxdet_reads_is_tfs(tmp_path):
    """Each zoo config as shipped, then with every optional scalar field removed, so that each
    field jaxdet reads with a default is read unset: no default written in jaxdet's code may
    differ from the one in TF's message (``default_drift``; TF's default is what jaxdet uses
    either way, and this keeps the code honest)."""
    drift = {}
    for path in ZOO:
        stripped = pipeline_message()
        text_format.Merge(path.read_text(), stripped)
        _without_scalars(stripped, REQUIRED)
        sparse = tmp_path / path.name
        sparse.write_text(text_format.MessageToString(stripped))
        for source in (path, sparse):
            for field, ours, tfs in convert_pipeline_config(source).default_drift:
                drift[field] = (ours, tfs, source.name)
    assert drift == {}


def test_an_unset_field_reads_as_tfs_default(tmp_path):
    """Hand-checked against ssd.proto / hyperparams.proto / train.proto: min_depth 16, the
    activation RELU, fine_tune_checkpoint_type "" (then "classification", as config_util)."""
    text = PETS.read_text().replace("min_depth: 16", "").replace("activation: RELU_6", "")
    text = text.replace("override_base_feature_extractor_hyperparams: true", "")
    path = tmp_path / "pipeline.config"
    path.write_text(text)
    config = load_pipeline_config(path)
    assert config.model.backbone.min_depth == 16
    assert config.model.neck.activation == "relu"
    ssd = message_descriptor("object_detection.protos.SsdFeatureExtractor")
    assert ssd.fields_by_name["min_depth"].default_value == 16


@needs_zoo
def test_every_zoo_config_parses_as_tf_parses_it():
    for path in ZOO:
        text_format.Merge(path.read_text(), pipeline_message())
        convert_pipeline_config(path)  # and converts, no drift (above)


def test_the_vendored_protos_and_their_compiled_form_agree():
    """descriptors.binpb holds every vendored .proto (rewrite it with compile_descriptors.py)."""
    from google.protobuf import descriptor_pb2

    protos = ROOT / "src" / "jaxdet" / "config" / "tfod_protos"
    files = descriptor_pb2.FileDescriptorSet.FromString(
        (protos / "descriptors.binpb").read_bytes())
    compiled = {f.name for f in files.file}
    vendored = {str(p.relative_to(protos)) for p in protos.rglob("*.proto")}
    assert compiled == vendored and len(vendored) == 34
    for f in files.file:
        source = (protos / f.name).read_text()
        for message in f.message_type:
            assert f"message {message.name} " in source or f"message {message.name}{{" in source


def test_a_config_override_merges_as_tfs_exporters_merge_it():
    """``--config_override``: a singular field replaced, a repeated one appended to, the rest
    kept; a mistake in it is one line naming the override and its field."""
    from jaxdet.config.tfod_proto import TfodProtoError, merged_pipeline_text

    text = PETS.read_text()
    merged = merged_pipeline_text(
        text, 'model { ssd { post_processing { batch_non_max_suppression { '
              'score_threshold: 0.5 } } } } eval_config { metrics_set: "pascal_voc_detection_'
              'metrics" }', "pets.config")
    theirs, ours = pipeline_message(), pipeline_message()
    text_format.Merge(text, theirs)
    text_format.Merge(merged, ours)
    nms = ours.model.ssd.post_processing.batch_non_max_suppression
    assert nms.score_threshold == pytest.approx(0.5)
    assert nms.iou_threshold == theirs.model.ssd.post_processing.batch_non_max_suppression \
        .iou_threshold
    assert list(ours.eval_config.metrics_set) == [*theirs.eval_config.metrics_set,
                                                   "pascal_voc_detection_metrics"]
    ours.model.ssd.post_processing.batch_non_max_suppression.score_threshold = (
        theirs.model.ssd.post_processing.batch_non_max_suppression.score_threshold)
    del ours.eval_config.metrics_set[-1]
    assert ours == theirs  # nothing else changed
    with pytest.raises(TfodProtoError) as caught:
        merged_pipeline_text(text, "model { ssd { num_clases: 3 } }", "pets.config")
    assert str(caught.value).startswith("pets.config --config_override:1:")
    assert "model.ssd.num_clases: TF's Ssd has no field 'num_clases'" in str(caught.value)
