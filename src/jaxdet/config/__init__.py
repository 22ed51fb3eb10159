"""The configuration: a typed schema (pydantic) read from YAML, and the TF OD API's
pipeline.config converted into it. A config loads and is checked without importing any family.

Modules: ``schema`` (every field a config may hold, with its default; the sections of
``schema_base`` (the base class), ``schema_model``, ``schema_center_net``, ``schema_datasets``,
``schema_faster_rcnn``, ``schema_deepmac``,
``schema_unet3d``, ``schema_volumes``, ``schema_augment``, ``schema_params``, re-exported by it),
``families`` (model sections a family outside jaxdet registers), ``loader`` (YAML with
``base:`` and ``--set`` overrides; ``ConfigError``), ``changes`` (what a resumed run changed),
``compare`` (field-level differences of two configs), ``placeholders`` (the TF OD API's
``PATH_TO_BE_CONFIGURED`` left in a config, refused), ``precision`` (the dtypes a job computes
in), ``input_size`` (the static input size of a config's resizer), ``keypoint_specs``
(keypoints as a config names them), ``label_map`` (TF OD API label maps, read and written),
``pbtxt`` (the protobuf text format), ``reference`` (the manual's generated config pages);
a pipeline.config converted: ``tfod`` (the dispatcher), ``tfod_common`` (what the mappers
share), ``tfod_ssd``, ``tfod_center_net``, ``tfod_deepmac``, ``tfod_faster_rcnn`` (one per
family), ``tfod_train`` (training, input and eval sections), ``tfod_params`` (TF's per-layer
initializers and regularizers), ``tfod_fields`` (the fields without a jaxdet setting),
``tfod_proto`` (read against the TF OD API's own ``.proto`` files)."""
