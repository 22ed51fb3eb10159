"""Running over many devices and processes: a ``(data, spatial)`` mesh and sharding rules.

Modules: ``mesh`` (the device mesh of a run), ``sharding`` (how the train state and a batch
lie on the mesh), ``distributed`` (``jax.distributed`` started once for several processes),
``build`` (the mesh of a config's ``parallel`` section, and the batch-layout check)."""
