#!/usr/bin/env bash
# The GPU check on a lent GPU machine that has jax with CUDA, torch and torchvision but not
# the rest of jaxdet's dependencies, and no network. From the repository root:
#
#   bash benchmarks/gpu_session.sh           # writes $OUT/gpu_check.json and $OUT/gpu_check.log
#
# The dependencies travel as wheels in .whl/ (an ignored folder, carried with the tree), made
# beforehand where pip can reach PyPI, for the machine's Python (3.12 on the lent H200s):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl grain==0.2.18 array-record pydantic pydantic-core annotated-types \
#       typing-inspection pycocotools simplejpeg google-crc32c tensorboardx nibabel \
#       importlib-resources portpicker
#
# (what jaxdet needs that the image lacks: its other dependencies, flax, optax, orbax, are
# there). jaxdet itself runs from src/ (the image's jax may be newer than jaxdet's pin, which
# only guards a CPU compile option).
set -o pipefail
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit
export PYTHONPATH="/tmp/site:$PWD/src:$PWD" PYTHONUNBUFFERED=1
python3 - <<'EOF' || exit
import jax, jaxdet, grain, pydantic, pycocotools, simplejpeg, flax, optax, orbax.checkpoint
print("jax", jax.__version__, "flax", flax.__version__, jax.devices())
EOF
python3 -m benchmarks.gpu_check --out "$OUT/gpu_check.json" "$@" 2>&1 | tee "$OUT/gpu_check.log"
