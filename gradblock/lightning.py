"""gradblock's hook under Lightning (optional extra `lightning`; docs/ddp.md):

    from gradblock.lightning import GradblockCallback
    trainer = Trainer(strategy="ddp", callbacks=[GradblockCallback()], ...)

Lightning registers a `DDPStrategy(ddp_comm_hook=...)` only when its device is CUDA, and
drops it without a word on the CPU. The callback registers the hook itself at fit start, on
the DDP model the strategy built (`trainer.strategy.model`), on any device; when the strategy
already registered the same state (CUDA) it leaves it. Settings are GradblockState's (the
best measured recipe by default, so the optimiser must run without momentum), or pass a
state built elsewhere: `GradblockCallback(state)`.
"""
# no `from __future__ import annotations`: Lightning inspects nothing here, but gradblock.ddp's
# hook keeps real annotations for DDP
try:
    from lightning.pytorch import Callback
except ImportError:                    # the older package name of the same framework
    from pytorch_lightning import Callback

import torch

from gradblock.codec.errors import UsageError
from gradblock.ddp import GradblockState, gradblock_hook

__all__ = ["GradblockCallback"]


class GradblockCallback(Callback):
    def __init__(self, state: GradblockState | None = None, **settings):
        if state is not None and settings:
            raise UsageError("GradblockCallback: pass a state or settings, not both")
        self.state = state if state is not None else GradblockState(**settings)

    def on_fit_start(self, trainer, pl_module) -> None:
        model = trainer.strategy.model
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise UsageError(f"GradblockCallback needs a DDP strategy (strategy='ddp'); "
                             f"the trainer's model is a {type(model).__name__}")
        hooks = getattr(model, "_comm_hooks", [])
        if any(s is self.state for _, s in hooks):
            return                     # DDPStrategy(ddp_comm_state=state, ...) on CUDA did it
        if not self.state.resolved:
            self.state.bind(pl_module)
        model.register_comm_hook(self.state, gradblock_hook)
