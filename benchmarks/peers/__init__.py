"""The TF OD API's side of the comparisons, run under the TF peer's Python (TensorFlow and
the TF OD API, no jaxdet), usually started by the jaxdet side's script:

    TF_USE_LEGACY_KERAS=1 PYTHONPATH=~/tfod-peer/tfod-src ~/tfod-peer/tfod-venv/bin/python \\
        -m benchmarks.peers.<name> ...          # from the repository's root

They import neither jaxdet nor ``benchmarks.common`` (an import-linter contract holds it);
each prints JSON."""
