"""How a training step's gradients travel between workers, one object per mode (`modes`): the
single-process simulation of N workers (`workers`), gradblock's DDP communication hook and the
state it keeps across calls (`hook`, `hook_state`; a bucket encoded and decoded on the device:
`device_codec`), global block selection for the allreduce
exchange (`global_step` per group, `global_exchange` the hook), torch's own DDP peers run in the
same harness (`peers`), the global-momentum update (`optim`), the per-worker state a checkpoint
carries (`state`) and surviving a lost rank under torchrun (`resilience`), with the small
process-group helpers (`device`, `process_group`) and a torchrun self-check (`ddp_check`). It
uses `shim.compress` and `shim.setup`; the trainer above chooses a mode and steps it."""
