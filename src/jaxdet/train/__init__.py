"""Training: the state, the compiled step, the loop and its checkpoints.

Modules: ``step`` (the train state and the compiled train step), ``accumulate`` (loss and
gradients, over micro-batches), ``loss_scale`` (float16 dynamic loss scaling), ``optim``
(schedules and optimizers, TF OD API's), ``optimizer_moments`` (another framework's optimizer
slots and step put into the optax state), ``build`` (optimizer, schedule, loss scaling and train
step of a config's ``train`` section), ``step_memory`` (what the compiled step needs in memory,
checked against what is free before it runs), ``loop`` (the hook-based loop), ``metrics_log``
(metrics.jsonl and TensorBoard), ``tf_tags`` (the TF OD API's TensorBoard tags),
``checkpoint`` (orbax checkpoints with metadata),
``checkpoint_integrity`` (checksums of a checkpoint's files), ``preemption`` (SIGTERM / SIGINT:
finish the step, checkpoint), ``workdir_lock`` (one training run per workdir),
``bucket_lock`` (the same for a workdir in a bucket: a lock object machines agree on),
``remote_workdir`` (workdirs in a bucket: checkpoints written there directly, the other files
through a local staging folder),
``workdir_variables`` (the variables of a workdir's latest checkpoint, as arrays, for another
run to start from)."""
