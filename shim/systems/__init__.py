"""The source papers' systems, built on the training shim (docs/papers.md).

`gradblock.shim` holds what training is made of: compressors, the DDP hook and the exchange,
optimiser, trainer, state, data and models. This subpackage holds the research systems the
source papers describe, run on top of that shim:

* DLGS layer merging (paper 000 §3): `merge_plan` (the iteration-time model and its greedy /
  exact planners), `merge_measure` (their measured inputs, `gradblock merge-plan`),
  `merge_apply` (a plan turned into groups of a model's layers, planned for a run),
  `merge_hook` (the DDP communication hook that exchanges those groups), `merge_check` (the
  merged hook against the plain hook and the simulation over a real gloo group).
* CSSGD coded exchange (paper 001 §2.1-2.4): `coded` (`gradblock coded`).

Imports go one way. These modules may import the training modules (compressors, hook,
exchange, optim, workers, data, models, ...). The training side uses them only through a narrow
seam, each import inside the function that needs it, so importing the shim loads none of this:

* `shim/exchange/modes.py`: `DdpExchange.bind` imports `merge_hook.register_merged` when a merge
  plan is given;
* `shim/training/trainer.py`: `Trainer._merge_groups` imports `merge_apply.plan_for_run` (the planner
  for `--merge-plan`).

tests/test_layering.py checks the seam and that there is no import cycle.
"""
