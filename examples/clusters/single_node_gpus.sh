#!/bin/bash
# jaxdet on one machine with several GPUs: one process drives every visible GPU; the batch is
# split over them (parallel.data=-1, the default).
#
#   bash examples/clusters/single_node_gpus.sh            # all GPUs
#   CUDA_VISIBLE_DEVICES=0,1 bash examples/clusters/single_node_gpus.sh   # two of them
#
# train.batch_size is the global batch: keep batch_size / GPUs at what one GPU did, and let
# the learning rate follow the batch linearly from the config's own batch
# (train.reference_batch_size).
set -euo pipefail

GPUS=$(python3 -c "import jax; print(jax.local_device_count())")
PER_GPU=${PER_GPU:-16}
CONFIG=${CONFIG:-retinanet_resnet50_fpn_640}
REFERENCE=${REFERENCE:-64}             # the batch the config's learning rates were set for

jaxdet train --config "$CONFIG" --workdir "${WORKDIR:-runs/$CONFIG}" \
    --set train.batch_size=$((PER_GPU * GPUS)) --set train.reference_batch_size="$REFERENCE"
