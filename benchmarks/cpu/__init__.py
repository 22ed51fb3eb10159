"""jaxdet's CPU forms, each against the form it replaces: the XLA FFI kernels (train steps,
predict calls, single ops, how many calls a step holds), Winograd convolutions; and where a
compiled step's time goes on XLA:CPU. They reach the kernels through ``jaxdet.backends``'
public modules (``dispatch``, ``trace``, ``process``) and environment variables, never
``jaxdet.backends.cpu``."""
