"""`gradblock` console script: one subcommand per job, and the one exit-code policy.

Each subcommand lives in the module that owns the job; this file only dispatches, importing
lazily so that `gradblock decode` does not pay for torch or cocotb. It is the only place that
turns an exception into an exit status (docs/limits.md):

  0  success
  2  a user error: a named error (GradblockError, the root every named error inherits) or a
     bad argument, reported as one line `gradblock COMMAND: ErrorClass: message` on stderr
  1  anything else escaping a command: a bug, reported as one line naming the exception
     (the traceback only with GRADBLOCK_DEBUG=1)
  130  interrupted (Ctrl-C)
  141  stdout closed early (`gradblock inspect f.bin | head -1`): quiet, as coreutils
"""
from __future__ import annotations

import contextlib
import importlib
import os
import select
import sys
import traceback
from typing import Callable

from gradblock.codec.errors import GradblockError, UsageError

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
DEBUG_ENV = "GRADBLOCK_DEBUG"

# name -> (module, function taking argv and returning an exit status, one-line help)
COMMANDS = {
    "quantise": ("gradblock.commands", "quantise_main", "float32 .npy -> int32 .npy"),
    "encode": ("gradblock.commands", "encode_main", "int32 .npy -> one ZRLE frame (.bin)"),
    "decode": ("gradblock.commands", "decode_main", "one ZRLE frame -> int32 .npy"),
    "step": ("gradblock.commands", "step_main", "quantise + feedback + select + encode one layer"),
    "inspect": ("gradblock.commands", "inspect_main", "readable dump of every frame in a message"),
    "golden": ("gradblock.golden_cli", "golden_main", "write golden vectors for the RTL"),
    "verify": ("gradblock.golden_cli", "verify_main", "run the RTL against a golden vector directory"),
    "mutate": ("gradblock.sim.mutation", "mutation_main", "mutation score of the golden set on the datapath RTL"),
    "formal": ("gradblock.hw.formal", "formal_main", "SymbiYosys proofs and covers of the RTL (hw/formal/)"),
    "synth": ("gradblock.hw.ecp5", "synth_main", "ECP5 place-and-route figures (or the generic yosys table)"),
    "train": ("gradblock.shim.training.train", "train_main", "train one configuration with a compressor"),
    "validate": ("gradblock.shim.training.validate", "validate_main", "dense vs topk vs dlgs vs coarse side by side"),
    "bench": ("gradblock.bench.run", "bench_main", "benchmark tables -> docs/benchmarks.md"),
    "demo": ("gradblock.demo", "demo_main", "the main job on the embedded default"),
    "coded": ("gradblock.shim.systems.coded", "coded_main", "CSSGD coded exchange: exactness and load vs uncoded"),
    "merge-plan": ("gradblock.shim.systems.merge_measure", "merge_plan_main", "DLGS layer merging: none/greedy/exact"),
    "split": ("gradblock.bench.engine_split", "split_main", "split a model's layers over compress engines"),
    "interfere": ("gradblock.bench.interference", "interfere_main", "two jobs alone and together: r_AB, r_BA"),
    "netbench": ("gradblock.bench.netbench", "netbench_main", "methods vs torch peers on a shaped network (root)"),
    "faults": ("gradblock.bench.faults", "faults_main", "kill / stop / bit-flip matrix under torchrun restarts"),
}

def is_named_error(exc: BaseException) -> bool:
    """A user error the CLI reports as one line with exit status 2: every named error of every
    layer inherits GradblockError (tests/test_errors.py walks them all)."""
    return isinstance(exc, GradblockError)


def _stdout_closed() -> bool:
    """Whether our stdout is a pipe whose reader has gone (`gradblock inspect f | head -1`).
    Checked on the descriptor itself, so a BrokenPipeError from some other pipe (a
    subprocess, a socket) is still reported as the bug it is."""
    try:
        fd = sys.__stdout__.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _quiet_closed_stdout() -> int:
    """A closed pipe ends quietly, as coreutils do (`seq 1 1000000 | head -1`): nothing on
    stderr, exit status 141 (128 + SIGPIPE, what the shell shows for them). Later writes and
    the interpreter's final flush go to /dev/null instead of raising again."""
    with contextlib.suppress(OSError, AttributeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
    return EXIT_PIPE


def _one_line(text: str, prefix: str = "") -> str:
    """The message on one line, without a `gradblock NAME:` prefix it already carries."""
    line = " ".join(str(text).split()) or "(no message)"
    while prefix and line.startswith(prefix):
        line = line[len(prefix):].lstrip() or "(no message)"
    return line


def _named(e: BaseException, prefix: str) -> str:
    """`ErrorClass: message`; just the message for an argument error (UsageError: the message
    names the option) and for a message that starts with the error's own code name (a frame
    error: `BAD_MAGIC at word 0: ...`, the name the RTL reports too)."""
    line = _one_line(e, prefix)
    code = getattr(type(e), "name", None)
    if isinstance(e, UsageError) or (isinstance(code, str) and line.startswith(code + " ")):
        return line
    return f"{type(e).__name__}: {line}"


def run_guarded(name: str, body: Callable[..., object], *args) -> int:
    """Run body(*args) under the exit-code policy above; print at most one line on stderr."""
    prefix = f"gradblock {name}:"
    try:
        status = int(body(*args) or 0)
        sys.stdout.flush()                   # a closed pipe shows here, not at exit
        return status
    except KeyboardInterrupt:
        print(f"{prefix} interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as e:                  # argparse and library code that still exits
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        print(f"{prefix} {_one_line(e.code, prefix)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:                   # noqa: BLE001 - the policy's whole point
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            return _quiet_closed_stdout()
        if os.environ.get(DEBUG_ENV) == "1":
            traceback.print_exc()
        if isinstance(e, ModuleNotFoundError) and e.name and not e.name.startswith("gradblock"):
            print(f"{prefix} needs the optional package {e.name!r}, which is not installed "
                  f"(pip install 'gradblock[all]')", file=sys.stderr)
            return EXIT_USAGE
        if is_named_error(e):
            print(f"{prefix} {_named(e, prefix)}", file=sys.stderr)
            return EXIT_USAGE
        hint = "" if os.environ.get(DEBUG_ENV) == "1" else f" (a bug: rerun with {DEBUG_ENV}=1 for the traceback)"
        print(f"{prefix} internal error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
        return EXIT_BUG


def usage() -> str:
    lines = ["usage: gradblock COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "gradblock COMMAND --help for a command's arguments",
              "exit status: 0 ok, 2 user error (one line on stderr), 1 internal error"]
    return "\n".join(lines)


def _dispatch(name: str, rest: list[str]) -> int:
    module, func, _ = COMMANDS[name]
    from gradblock.fastpath.vector_width import choose_vector_width
    choose_vector_width()     # 512-bit numba vectors on AVX-512, before numba is imported
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        return run_guarded("help", print, usage())     # `gradblock | head -1` ends quietly too
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gradblock: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return EXIT_USAGE
    had_dist = "torch.distributed" in sys.modules
    status = run_guarded(name, _dispatch, name, rest)
    if _started_collectives(had_dist):         # join gloo's threads before Python finalises
        from gradblock.shim.exchange.process_group import end_process_group
        end_process_group()
    return status


def _started_collectives(had_dist: bool) -> bool:
    """Whether this command may have left a process group (or its last holders) behind: it
    brought torch.distributed in, or a group is still up. Not every in-process call (a
    collection costs tens of ms with torch loaded; the CLI fuzz tests make thousands)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    return not had_dist or (dist.is_available() and dist.is_initialized())


if __name__ == "__main__":
    sys.exit(main())
