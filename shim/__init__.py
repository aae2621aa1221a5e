"""The torch training shim, split by job; each subpackage imports only those listed before it
(tests/test_layering.py SHIM_LAYERS): `compress` (a worker's gradients to frames and back),
`setup` (one run's settings, data set and model), `exchange` (how a step's gradients travel
between workers: the simulation, the DDP hooks, torch's own peers, the state a worker keeps),
`training` (the trainer and the `train` / `validate` commands) and `systems` (the source papers'
systems, on top). `errors` (the shim's named errors) and `params` (every training parameter
declared once: its type, range or choices, the rules between them, the names lists) are shared
by all of them; where a run may write, and what it may replace, is gradblock.codec.fileio's
output policy."""
