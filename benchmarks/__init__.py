"""jaxdet's benchmarks: scripts that measure and print JSON, grouped by what they measure.

Each runs from the repository's root as a module, ``python -m benchmarks.<group>.<name>``
(``--help`` says what it takes):

* ``throughput``: train steps, predict calls, exported artifacts, checkpoint loading, whole
  training runs; jaxdet alone and against the TF OD API and torchvision;
* ``input``: the input pipeline, against TF's tf.data and against the train step;
* ``memory``: per-device memory under spatial partitioning and gradient checkpointing;
* ``accuracy``: AP and detections against the TF OD API, exported artifacts against predict,
  the manual's recipes;
* ``cpu``: jaxdet's CPU kernels and convolution forms, each against the form it replaces;
  where a step's time goes;
* ``peers``: the TF OD API's side of the comparisons, run under the TF peer's Python (which
  has no jaxdet): they import neither jaxdet nor :mod:`benchmarks.common`.

:mod:`benchmarks.common` holds what the others share: machine info, timing (calls, rounds by
turns, medians), synthetic batches, and starting a peer's script. This file and the groups'
``__init__.py`` import nothing, so the TF peer's Python can run ``benchmarks.peers``.
"""
