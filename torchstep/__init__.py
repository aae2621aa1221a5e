"""The gradblock compress step in torch (docs/spec.md §1, §2, §4, §5), one module per section:
quantiser (§1), selection (§2 error feedback and block selection), layer (§4 one layer),
group (§4 many layers in one pass), exchange (§5 the exact sum). The wire format (ZRLE frames,
CRC-32) is codec.zrle_torch / codec.crc32_torch. Bit-exact with refmodel/ + codec/zrle.py."""
from .exchange import sum_payloads
from .group import FlatStep, GroupPlan, GroupStep, compress_group, plan_group, step_flat
from .layer import TorchLayerStep, compress_layer
from .quantiser import QMAX, average, dequantise, quant_config, quantise, saturation_bits
from .selection import apply_selection, block_norms, error_feedback, select_blocks

__all__ = ["sum_payloads", "FlatStep", "GroupPlan", "GroupStep", "compress_group", "plan_group",
           "step_flat",
           "TorchLayerStep", "compress_layer", "QMAX", "average", "dequantise", "quant_config",
           "quantise", "saturation_bits", "apply_selection", "block_norms", "error_feedback",
           "select_blocks"]
