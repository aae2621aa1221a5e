"""Reports for `gradblock validate`: the markdown tables (per run, and per row over seeds), the
JSON file, the PNG of curves and the accuracy-compression figure with error bars."""
from __future__ import annotations

import json
import math
from pathlib import Path

from gradblock.codec.fileio import write_own, write_own_text


def _fmt(v, spec: str, missing: str = "n/a") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    return format(v, spec)


def setting_of(result: dict) -> str:
    """A short description of a run's compressor setting ('k=1', 'density match k=1', ...)."""
    c = result["compressor_config"]
    name = c["name"]
    extra = f", dense<{c['dense_below']}" if c.get("dense_below") else ""
    cfg = result.get("config", {})
    warm = cfg.get("warmup_epochs")
    if warm and name != "dense":
        extra += f", {warm} dense warm-up epoch{'s' if warm > 1 else ''}"
    if c.get("local_momentum_fix"):
        extra += (f", correction m={cfg.get('local_momentum', c['local_momentum_fix'] / 65536):g}"
                  + ("" if c.get("momentum_mask", True) else " unmasked"))
    elif cfg.get("momentum"):
        extra += f", global m={cfg['momentum']:g}"
    if c.get("warmup_steps"):
        extra += (f", sparsity warm-up {c['warmup_start_fraction']:g} over "
                  f"{c['warmup_steps']} steps")
    if name == "coarse":
        return f"k={c['k']}{extra}"
    if name in ("topk", "dlgs"):
        d = c["density"]
        dens = f"as coarse k={c['match_k']}" if d == "match" else f"density {d:g}"
        return dens + (f", every {c['interval']} steps" if name == "dlgs" else "") + extra
    if name == "powersgd":
        return f"torch powerSGD_hook rank {c['matrix_approximation_rank']}" + extra
    if name in ("fp16", "allreduce"):
        return ("torch fp16_compress_hook" if name == "fp16" else "DDP allreduce, float32") + extra
    return "float32" + extra


def label_of(result: dict) -> str:
    return f"{result['compressor_config']['name']} {setting_of(result)}"


PNG_SOFTWARE = "gradblock validate"        # the plots' PNG tEXt Software chunk

TABLE_HEADER = ("| compressor | setting | test acc | Δ vs dense (pts) | compression | sent MB (all workers) "
                "| KB/worker/step | compress ms/step | compute / compress / exchange ms/step "
                "| sat quant / feedback |")


def format_table(results: list[dict]) -> str:
    """Markdown table, one row per run; Δ is against the dense run of the same seed (if any)."""
    dense = {r["config"].get("seed"): r["final_test_acc"] for r in reversed(results)
             if r["compressor_config"]["name"] == "dense"}
    lines = [TABLE_HEADER, "|" + "---|" * (TABLE_HEADER.count("|") - 1)]
    for r in results:
        acc = r["final_test_acc"]
        base = dense.get(r["config"].get("seed"))
        delta = None if base is None or acc is None else 100.0 * (acc - base)
        steps, workers = r["steps"], r["config"]["workers"]
        per_step_kb = r["bytes_sent"] / 1e3 / (steps * workers) if steps else None
        ms = r["ms_per_step"]
        phase = lambda key: _fmt(ms.get(key), ".1f", "–")  # noqa: E731  (None: not timed)
        sat = (f"{r['sat_quant']} / {r['sat_feedback']}"
               + (f" / {r['sat_momentum']} momentum" if r.get("sat_momentum") else "")
               if r["compressor_config"]["name"] == "coarse" else "–")
        lines.append(
            f"| {r['compressor_config']['name']} | {setting_of(r)} | {_fmt(acc, '.4f')} "
            f"| {_fmt(delta, '+.2f')} | {_fmt(r['compression_ratio'], '.1f')}x "
            f"| {r['bytes_sent'] / 1e6:.3f} | {_fmt(per_step_kb, '.2f')} "
            f"| {_fmt(ms.get('compress_ms'), '.2f', '–')} "
            f"| {phase('compute_ms')} / {phase('compress_ms')} / {phase('exchange_ms')} | {sat} |")
    return "\n".join(lines)


def describe_run(results: list[dict], seeds: list[int] | None = None) -> str:
    """One line naming what every run of the matrix shared."""
    if not results:
        return ""
    r0 = next((r for r in results if r["config"].get("local_momentum")), results[0])
    c = r0["config"]
    subset = f", train subset {c['train_subset']}" if c.get("train_subset") else ""
    tsub = f", test subset {c['test_subset']}" if c.get("test_subset") else ""
    ramp = f" (linear warm-up over {c['lr_warmup_epochs']:g} epochs)" \
        if c.get("lr_warmup_epochs") else ""
    return (f"{c['data']} / {c['model']}, {c['workers']} workers x batch {c['batch_size']}, "
            f"{c['epochs']} epoch(s) = {r0['steps']} steps, lr {c['lr']}{ramp}, "
            + (f"local momentum {c['local_momentum']} (dense: global)"
               if c.get("local_momentum") else f"global momentum {c['momentum']}")
            + (f", seeds {' '.join(map(str, seeds))}" if seeds and len(seeds) > 1
               else f", seed {c['seed']}")
            + f"{subset}{tsub}, "
            f"{r0['mode']} on {r0['device']}")


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof 1; 0.0 for one value)."""
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarise_rows(rows: list[tuple[str, object]], results: list[dict]) -> list[dict]:
    """One entry per matrix row over its seeds: accuracies in seed order, mean ± sample std,
    compression (total dense bytes / total bytes sent over the seeds), saturations, and Δ of
    the mean against dense's mean."""
    out = []
    for name, _ in rows:
        runs = [r for r in results if r.get("row") == name]
        if not runs:
            continue
        accs = [r["final_test_acc"] for r in runs]
        mean, std = _mean_std([a for a in accs if a is not None])
        sent = sum(r["bytes_sent"] for r in runs)
        out.append({
            "name": name, "compressor": runs[0]["compressor_config"]["name"],
            "setting": setting_of(runs[0]),
            "seeds": [r["config"]["seed"] for r in runs], "accs": accs,
            "acc_mean": mean, "acc_std": std,
            "compression": (sum(r["dense_bytes"] for r in runs) / sent
                            if sent and all("dense_bytes" in r for r in runs) else None),
            "bytes_sent": sent,
            "sat_quant": sum(r["sat_quant"] for r in runs),
            "sat_feedback": sum(r["sat_feedback"] for r in runs),
            "sat_momentum": sum(r.get("sat_momentum", 0) for r in runs),
            "ms_per_step": _mean_std([r["ms_per_step"]["step_ms"] for r in runs
                                      if r["ms_per_step"].get("step_ms") is not None])[0],
        })
    dense = next((r for r in out if r["name"] == "dense"), None)
    for r in out:
        r["delta_vs_dense_pts"] = (100.0 * (r["acc_mean"] - dense["acc_mean"])
                                   if dense and r["acc_mean"] is not None
                                   and dense["acc_mean"] is not None else None)
    return out


def format_row_table(rows: list[dict]) -> str:
    """Markdown: one line per matrix row, mean ± std over seeds and every seed's accuracy."""
    lines = ["| row | setting | test acc mean ± std | each seed | Δ mean vs dense (pts) "
             "| compression | sat quant / feedback / momentum |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        each = ", ".join(f"{s}: {_fmt(a, '.4f')}" for s, a in zip(r["seeds"], r["accs"]))
        lines.append(f"| {r['name']} | {r['setting']} | {_fmt(r['acc_mean'], '.4f')} ± "
                     f"{_fmt(r['acc_std'], '.4f')} | {each} | {_fmt(r['delta_vs_dense_pts'], '+.2f')} "
                     f"| {_fmt(r['compression'], '.1f')}x | {r['sat_quant']} / {r['sat_feedback']} / "
                     f"{r['sat_momentum']} |")
    return "\n".join(lines)


def plot_acc_compression(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Test accuracy (mean, error bar = sample std over seeds, dots = each seed) against
    compression (log scale), one point per row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for r in rows:
        if r["acc_mean"] is None or r["compression"] is None:
            continue
        line = ax.errorbar([r["compression"]], [r["acc_mean"]], yerr=[r["acc_std"]], fmt="o",
                           capsize=4, label=f"{r['name']}: {r['setting']}")
        ax.scatter([r["compression"]] * len(r["accs"]), [a for a in r["accs"]], s=10, alpha=0.5,
                   color=line[0].get_color())
    ax.set_xscale("log")
    ax.set_xlabel("compression (dense bytes / bytes sent)")
    ax.set_ylabel("final test accuracy (mean ± std over seeds; dots: seeds)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title, fontsize=8, wrap=True)
    fig.tight_layout()
    try:
        write_own(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png",
                                                   metadata={"Software": PNG_SOFTWARE}))
    finally:
        plt.close(fig)
    return Path(path)


def write_json(path: str | Path, payload) -> Path:
    return write_own_text(path, json.dumps(payload, indent=2) + "\n")


def plot_curves(results: list[dict], path: str | Path, title: str = "") -> Path:
    """Test accuracy, test loss and train loss against epochs, one line per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    panels = (("test_acc", "test accuracy"), ("test_loss", "test loss"), ("train_loss", "train loss"))
    for r in results:
        xs = [p["epoch"] for p in r["curves"]]
        for ax, (key, _) in zip(axes, panels):
            ax.plot(xs, [p[key] for p in r["curves"]], marker="o", markersize=3, label=label_of(r))
    for ax, (_, name) in zip(axes, panels):
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    try:
        write_own(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png",
                                                   metadata={"Software": PNG_SOFTWARE}))
    finally:
        plt.close(fig)
    return Path(path)


NO_ROWS = "no row finished"
