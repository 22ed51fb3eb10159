"""Readers (and a writer) of other frameworks' files, without those frameworks. The families'
own name maps live in ``tasks/<family>/``.

Modules: ``formats`` (which framework wrote a weights file or folder), ``tf_checkpoint`` (TF2
checkpoints read without TensorFlow), ``tf_checkpoint_writer`` (and written: the way back to
TF), ``sstable`` (the sorted table of a checkpoint's ``.index``, read and written),
``protowire`` (the protobuf wire format), ``tf_import`` (a TF checkpoint copied
into a model by a name map), ``array_import`` (a PyTorch state dict or a jaxdet checkpoint's
variables copied into a model), ``tfod_names`` (what every TF OD API name map shares),
``tf_zoo`` (TF2 zoo tarballs downloaded once into a cache), ``torch_files`` (PyTorch weight
files as arrays), ``torch_names`` (torchvision / timm ``state_dict`` keys <-> our
parameters)."""
