"""The training loop and its commands: the `Trainer` (one configuration, one compressor, an
exchange mode from `shim.exchange`, checkpoints, evaluation; `trainer`), the learning-rate
schedule and worker-side gradient hooks (`schedule`), the argparse options of `gradblock train`
and `gradblock validate` (`arguments`), the two commands (`train`, `validate`) with validate's
tables and plots (`report`), and one rank of a torch peer run under torchrun (`peer_rank`). It
sits on every other subpackage of the shim; only `shim.systems` stands above it."""
