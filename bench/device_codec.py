"""Operator and host-sync counts of one rank's coarse exchange per DDP bucket (issue 29 item 3):

    python -m gradblock.bench.device_codec                      # ResNet-50 shapes, widths / 8
    python -m gradblock.bench.device_codec --scale 1 --json F   # the real widths (25.6 M params)

What a GPU would launch and wait for, counted on the CPU with torch.profiler, so a regression
shows without a GPU. Per bucket (DDP's order: parameters reversed, 1 MB first bucket, then
25 MB) and per path:
* `host` -- the CUDA path before issue 29: torch's group encode (torchstep.compress_group, the
  ops a GPU runs) and the gathered slots decoded through the host (one copy off the device,
  numba), the averages written back;
* `device` -- shim/exchange/device_codec.py: the slot encoded and the gathered slots decoded,
  summed and averaged on the device, plus the one read of its validity flag.
`ops`: aten operators called at top level, views and other metadata-only operators left out
(they launch no kernel; VIEW_OPS). `syncs`: host reads of device data -- aten::_local_scalar_dense
(.item(), bool(), int()), aten::nonzero (boolean indexing and nonzero size their output on the
host) and .tolist() / .numpy() / .cpu() (not aten operators on the CPU, counted by wrapping
them). The collective itself is not counted (a torch.stack of the ranks' slots stands in).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys

import torch

# metadata-only operators: no kernel, no sync
VIEW_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::slice",
    "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::split",
    "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::detach", "aten::alias",
    "aten::t", "aten::transpose", "aten::permute", "aten::flatten", "aten::unflatten",
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::lift_fresh",
    "aten::resolve_conj", "aten::resolve_neg", "aten::view_as", "aten::expand_as",
    "aten::narrow", "aten::set_", "aten::contiguous", "aten::result_type", "aten::is_nonzero",
    "aten::numpy_T", "aten::dim", "aten::size", "aten::stride", "aten::_unsafe_view",
    "aten::to", "aten::type_as", "aten::is_same_size", "aten::pin_memory",
})
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")


def resnet50_shapes(scale: int = 8) -> list[tuple[int, ...]]:
    """torchvision's resnet50 parameter shapes (161 tensors) in its order, every width divided
    by `scale` (the classifier's 1000 classes too): the same layers, less memory."""
    s = lambda c: max(1, c // scale)  # noqa: E731
    shapes: list[tuple[int, ...]] = [(s(64), 3, 7, 7), (s(64),), (s(64),)]
    cin = s(64)
    for width, blocks in zip((64, 128, 256, 512), (3, 4, 6, 3)):
        w = s(width)
        for b in range(blocks):
            shapes += [(w, cin, 1, 1), (w,), (w,), (w, w, 3, 3), (w,), (w,), (4 * w, w, 1, 1),
                       (4 * w,), (4 * w,)]
            if b == 0:
                shapes += [(4 * w, cin, 1, 1), (4 * w,), (4 * w,)]
            cin = 4 * w
    return shapes + [(s(1000), cin), (s(1000),)]


def ddp_buckets(shapes, first_mb: float = 1.0, cap_mb: float = 25.0) -> list[list[int]]:
    """DDP's bucket assignment for float32 parameters: reverse order, the first bucket capped
    at `first_mb`, the rest at `cap_mb` (torch's defaults)."""
    buckets, cur, size, cap = [], [], 0, first_mb * 2**20
    for i in reversed(range(len(shapes))):
        n = 4 * int(torch.Size(shapes[i]).numel())
        cur.append(i)
        size += n
        if size >= cap:
            buckets.append(cur)
            cur, size, cap = [], 0, cap_mb * 2**20
    if cur:
        buckets.append(cur)
    return buckets


@contextlib.contextmanager
def host_reads():
    """Count .tolist() / .numpy() / .cpu() calls (host reads the profiler does not see on CPU
    tensors)."""
    counts = {"n": 0}
    saved = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy", "cpu")}

    def wrap(fn):
        def counted(self, *a, **kw):
            counts["n"] += 1
            return fn(self, *a, **kw)
        return counted
    for name, fn in saved.items():
        setattr(torch.Tensor, name, wrap(fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def profile(fn) -> dict:
    """Run fn() under torch.profiler (CPU) -> {"ops", "syncs", "by_op"} as the module doc says."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    with host_reads() as reads, tprofile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    ops, syncs, by_op = 0, reads["n"], {}
    for e in prof.events():
        name = e.name
        if name in SYNC_OPS:
            syncs += 1
        if not name.startswith("aten::") or name in VIEW_OPS:
            continue
        parent, top = e.cpu_parent, True
        while parent is not None:
            if parent.name.startswith("aten::"):
                top = False
                break
            parent = parent.cpu_parent
        if top:
            ops += 1
            by_op[name] = by_op.get(name, 0) + 1
    return {"ops": ops, "syncs": syncs, "by_op": by_op}


def _bucket_views(shapes) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One flat buffer and its views, as a DDP bucket's gradients (the same every step)."""
    flat = torch.zeros(sum(int(torch.Size(s).numel()) for s in shapes))
    out, at = [], 0
    for s in shapes:
        n = int(torch.Size(s).numel())
        out.append(flat[at:at + n].view(s))
        at += n
    return flat, out


def bucket_counts(shapes, path: str, world: int = 2, k=1, dense_below: int = 0,
                  warm_steps: int = 1) -> dict:
    """One rank's counts for one bucket of `shapes`: its encode, the decode of `world` ranks'
    slots and the averages written into its views (after `warm_steps` uncounted steps, so
    plans, caches and residuals exist as in training)."""
    from gradblock import torchstep as tc
    from gradblock.shim.compress.compressors import (LayerInfo, build_compressor, decode_group,
                                                     encode_group)
    from gradblock.shim.exchange.device_codec import (bucket_error, decode_bucket, encode_bucket,
                                                      write_views)
    from gradblock.shim.exchange.hook import slot_of

    layers = [LayerInfo(i, f"p{i}", tuple(s)) for i, s in enumerate(shapes)]
    comp = build_compressor("coarse", layers, world, k=k, dense_below=dense_below)
    comp.host_fast = False                      # the torch ops a GPU runs, on CPU tensors
    states = [comp.new_worker_state() for _ in range(world)]

    buckets = [_bucket_views(shapes) for _ in range(world)]
    grads = [views for _, views in buckets]

    def step(seed: int) -> dict:
        for r, (flat, _) in enumerate(buckets):         # this step's gradients, in place
            g = torch.Generator().manual_seed(seed * world + r)
            flat.copy_(torch.randn(flat.numel(), generator=g) * 0.01)
        width = comp.message_bound(layers, states[0]) + 1
        if path == "device":
            others = [encode_bucket(comp, layers, grads[r], states[r], width).slot
                      for r in range(1, world)]

            def rank0():
                sent = encode_bucket(comp, layers, grads[0], states[0], width)
                gathered = torch.stack([sent.slot, *others])
                bad = decode_bucket(sent, gathered)
                if bool(bad):                   # the one host read of the bucket
                    bucket_error(comp, sent, gathered, 0, states[0])
        else:
            others = [slot_of(encode_group(comp, layers, grads[r], states[r])[0], width - 1)
                      for r in range(1, world)]

            def rank0():
                msg, _ = encode_group(comp, layers, grads[0], states[0])   # CRCs: torch tree
                gathered = torch.stack([slot_of(msg, width - 1), *others])
                host = gathered.cpu()
                lengths = host[:, 0].tolist()
                msgs = [host[r, 1:1 + n] for r, n in enumerate(lengths)]
                comp.host_fast = True           # the host decode: numba
                try:
                    averaged = decode_group(comp, layers, msgs)
                finally:
                    comp.host_fast = False
                for v, a in zip(grads[0], averaged):    # one copy per layer, as before
                    v.copy_(a.to(v.device).reshape(v.shape))
        return profile(rank0)

    # the host row is what a GPU ran: torch's CRC tree, not zlib on the CPU tensor
    saved = tc.compress_group
    if path == "host":
        tc.compress_group = functools.partial(saved, crc="torch")
    try:
        for s in range(warm_steps):
            step(100 + s)
        got = step(0)
    finally:
        tc.compress_group = saved
    got.update(layers=len(shapes), elements=sum(int(torch.Size(s).numel()) for s in shapes))
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=8, help="divide ResNet-50's widths by this")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--paths", default="host,device")
    ap.add_argument("--json", help="write the rows here too")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    shapes = resnet50_shapes(a.scale)
    buckets = ddp_buckets(shapes, cap_mb=25.0 / a.scale ** 2, first_mb=1.0 / a.scale ** 2)
    rows = []
    print(f"ResNet-50 shapes / {a.scale}: {len(shapes)} tensors, {len(buckets)} DDP buckets, "
          f"world {a.world}, coarse k = 1")
    print(f"{'bucket':>6} {'layers':>6} {'elements':>9} {'path':>6} {'ops':>6} {'syncs':>6}")
    for b, idx in enumerate(buckets):
        for path in a.paths.split(","):
            c = bucket_counts([shapes[i] for i in idx], path, a.world)
            rows.append({"bucket": b, "path": path, **{k: v for k, v in c.items() if k != "by_op"}})
            print(f"{b:>6} {c['layers']:>6} {c['elements']:>9} {path:>6} {c['ops']:>6} "
                  f"{c['syncs']:>6}")
    if a.json:
        from gradblock.codec.fileio import write_text
        write_text(a.json, json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
