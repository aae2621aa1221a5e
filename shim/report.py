"""Reports for `gradblock validate`: the markdown table, the JSON file, the PNG of curves."""
from __future__ import annotations

import json
import math
from pathlib import Path

from .outputs import atomic_write, atomic_write_text


def _fmt(v, spec: str, missing: str = "n/a") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    return format(v, spec)


def setting_of(result: dict) -> str:
    """A short description of a run's compressor setting ('k=1', 'density match k=1', ...)."""
    c = result["compressor_config"]
    name = c["name"]
    extra = f", dense<{c['dense_below']}" if c.get("dense_below") else ""
    warm = result.get("config", {}).get("warmup_epochs")
    if warm and name != "dense":
        extra += f", {warm} dense warm-up epoch{'s' if warm > 1 else ''}"
    if name == "coarse":
        return f"k={c['k']}{extra}"
    if name in ("topk", "dlgs"):
        d = c["density"]
        dens = f"as coarse k={c['match_k']}" if d == "match" else f"density {d:g}"
        return dens + (f", every {c['interval']} steps" if name == "dlgs" else "") + extra
    return "float32" + extra


def label_of(result: dict) -> str:
    return f"{result['compressor_config']['name']} {setting_of(result)}"


TABLE_HEADER = ("| compressor | setting | test acc | Δ vs dense (pts) | compression | sent MB (all workers) "
                "| KB/worker/step | compress ms/step | compute / compress / exchange ms/step "
                "| sat quant / feedback |")


def format_table(results: list[dict]) -> str:
    """Markdown table, one row per run; Δ is against the first dense run (if any)."""
    dense = next((r for r in results if r["compressor_config"]["name"] == "dense"), None)
    base = dense["final_test_acc"] if dense else None
    lines = [TABLE_HEADER, "|" + "---|" * (TABLE_HEADER.count("|") - 1)]
    for r in results:
        acc = r["final_test_acc"]
        delta = None if base is None or acc is None else 100.0 * (acc - base)
        steps, workers = r["steps"], r["config"]["workers"]
        per_step_kb = r["bytes_sent"] / 1e3 / (steps * workers) if steps else None
        ms = r["ms_per_step"]
        phase = lambda key: _fmt(ms.get(key), ".1f", "–")  # noqa: E731  (None: not timed)
        sat = (f"{r['sat_quant']} / {r['sat_feedback']}"
               if r["compressor_config"]["name"] == "coarse" else "–")
        lines.append(
            f"| {r['compressor_config']['name']} | {setting_of(r)} | {_fmt(acc, '.4f')} "
            f"| {_fmt(delta, '+.2f')} | {_fmt(r['compression_ratio'], '.1f')}x "
            f"| {r['bytes_sent'] / 1e6:.3f} | {_fmt(per_step_kb, '.2f')} "
            f"| {_fmt(ms.get('compress_ms'), '.2f', '–')} "
            f"| {phase('compute_ms')} / {phase('compress_ms')} / {phase('exchange_ms')} | {sat} |")
    return "\n".join(lines)


def describe_run(results: list[dict]) -> str:
    """One line naming what every run of the matrix shared."""
    if not results:
        return ""
    c = results[0]["config"]
    r0 = results[0]
    subset = f", train subset {c['train_subset']}" if c.get("train_subset") else ""
    tsub = f", test subset {c['test_subset']}" if c.get("test_subset") else ""
    ramp = f" (linear warm-up over {c['lr_warmup_epochs']:g} epochs)" \
        if c.get("lr_warmup_epochs") else ""
    return (f"{c['data']} / {c['model']}, {c['workers']} workers x batch {c['batch_size']}, "
            f"{c['epochs']} epoch(s) = {r0['steps']} steps, lr {c['lr']}{ramp}, global momentum "
            f"{c['momentum']}, seed {c['seed']}{subset}{tsub}, "
            f"{r0['mode']} on {r0['device']}")


def write_json(path: str | Path, payload) -> Path:
    return atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


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
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return Path(path)
