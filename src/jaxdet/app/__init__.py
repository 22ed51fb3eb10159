"""The commands and whole jobs: ``cli`` (every ``jaxdet`` command), ``runs`` (train, evaluate,
import weights, load for inference), ``predict``, ``export_job``, ``convert_dataset`` and
``plots`` (training curves)."""
