#!/bin/bash
# jaxdet on a Cloud TPU VM pod slice: create it, install on every worker, train with data and
# workdir in Cloud Storage, watch, stop and resume.
#
#   bash examples/clusters/cloud_tpu_pod.sh create|install|train|watch|stop|delete
#
# Every worker runs the same command (--worker=all); JAX reads the slice's hosts from the TPU
# metadata, so nothing names the processes. The data and config are read from the bucket;
# the workdir is a bucket folder too: every worker writes its part of each checkpoint straight
# into it (no gcsfuse mount, no shared disk). The TPU VMs' service account needs read and
# write access to the bucket.
set -euo pipefail

NAME=${NAME:-jaxdet-v4-32}
ZONE=${ZONE:-us-central2-b}
TYPE=${TYPE:-v4-32}                    # 4 hosts of 4 chips
VERSION=${VERSION:-tpu-ubuntu2204-base}
BUCKET=${BUCKET:-gs://my-bucket}
RUN=${RUN:-$BUCKET/runs/retinanet-$TYPE}       # the workdir, in the bucket
CONFIG=${CONFIG:-$BUCKET/configs/pipeline.config}   # TFRecords and label map in the bucket too

on_all() {
  gcloud compute tpus tpu-vm ssh "$NAME" --zone="$ZONE" --worker=all --command="$1"
}

case "${1:-}" in
  create)
    gcloud compute tpus tpu-vm create "$NAME" --zone="$ZONE" --accelerator-type="$TYPE" \
        --version="$VERSION" ;;
  install)
    on_all "python3 -m venv ~/jaxdet && ~/jaxdet/bin/pip install -q 'jax[tpu]' 'jaxdet[gcs]'" ;;
  train)  # the same command resumes a stopped or preempted run from its last checkpoint
    on_all "nohup ~/jaxdet/bin/jaxdet train --pipeline-config $CONFIG --workdir $RUN \
        --set train.batch_size=256 > ~/train.log 2>&1 &" ;;
  watch)
    gcloud compute tpus tpu-vm ssh "$NAME" --zone="$ZONE" --worker=0 \
        --command="tail -f ~/train.log" ;;
  stop)  # SIGTERM: every process checkpoints the same step, then exits
    on_all "pkill -TERM -f 'jaxdet train' || true" ;;
  delete)
    gcloud compute tpus tpu-vm delete "$NAME" --zone="$ZONE" --quiet ;;
  *)
    echo "usage: $0 create|install|train|watch|stop|delete" >&2; exit 2 ;;
esac
