"""torch's DDP peers by name (shim/exchange/peers.py runs them): the names, PowerSGD's fixed settings,
and the check of the training settings a peer cannot honour. Kept apart from shim/exchange/peers.py so
that `TrainConfig.check` and the argument parser can use them without importing the exchange."""
from __future__ import annotations

from ..errors import ConfigError

PEERS = ("allreduce", "fp16", "powersgd")
POWERSGD_START_ITER = 2
POWERSGD_MIN_COMPRESSION_RATE = 2


def check_peer_config(cfg) -> None:
    """ConfigError for settings a torch peer cannot honour."""
    if cfg.compressor not in PEERS:
        return
    refused = [(cfg.local_momentum > 0, "--local-momentum"), (cfg.warmup_epochs > 0, "--warmup-epochs"),
               (cfg.sparsity_warmup_steps > 0, "--sparsity-warmup-steps"),
               (cfg.merge_plan not in (None, "none"), "--merge-plan"),
               (bool(cfg.checkpoint), "--checkpoint"), (bool(cfg.resume), "--resume")]
    for bad, option in refused:
        if bad:
            raise ConfigError(f"{option} is not supported with the torch peer "
                              f"--compressor {cfg.compressor}")
    r = getattr(cfg, "powersgd_rank", 1)
    if not (isinstance(r, int) and not isinstance(r, bool) and r >= 1):
        raise ConfigError(f"powersgd_rank must be an integer >= 1, got {r!r}")
