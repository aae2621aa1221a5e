"""`gradblock` console script: one subcommand per job.

Each subcommand lives in the module that owns the job; this file only dispatches, importing
lazily so that `gradblock decode` does not pay for torch or cocotb.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module, function taking argv and returning an exit status, one-line help)
COMMANDS = {
    "quantise": ("gradblock.commands", "quantise_main", "float32 .npy -> int32 .npy"),
    "encode": ("gradblock.commands", "encode_main", "int32 .npy -> one ZRLE frame (.bin)"),
    "decode": ("gradblock.commands", "decode_main", "one ZRLE frame -> int32 .npy"),
    "step": ("gradblock.commands", "step_main", "quantise + feedback + select + encode one layer"),
    "inspect": ("gradblock.commands", "inspect_main", "readable dump of every frame in a message"),
    "golden": ("gradblock.golden_cli", "golden_main", "write golden vectors for the RTL"),
    "verify": ("gradblock.sim.verify", "verify_main", "run the RTL against a golden vector directory"),
    "train": ("gradblock.shim.train", "train_main", "train one configuration with a compressor"),
    "validate": ("gradblock.shim.validate", "validate_main", "dense vs topk vs dlgs vs coarse side by side"),
    "bench": ("gradblock.bench.run", "bench_main", "benchmark tables -> docs/benchmarks.md"),
    "demo": ("gradblock.demo", "demo_main", "the main job on the embedded default"),
    "coded": ("gradblock.shim.coded", "coded_main", "CSSGD coded exchange: exactness and load vs uncoded"),
    "merge-plan": ("gradblock.shim.merge_measure", "merge_plan_main", "DLGS layer merging: none/greedy/exact"),
}


def usage() -> str:
    lines = ["usage: gradblock COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "gradblock COMMAND --help for a command's arguments"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gradblock: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
