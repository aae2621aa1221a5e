"""`gradblock golden`: write golden vectors for the RTL testbenches and check them against the
numpy reference (docs/golden.md); a summary table of the cases."""
from __future__ import annotations

from gradblock.codec.errors import UsageError, UsageParser
from gradblock.golden.check import CheckResult, check_golden
from gradblock.golden.compute import generate_golden
from gradblock.golden.format import GoldenCase, GoldenError, load_exchange, load_golden


def generate(out_dir, *, quick: bool = False, real_source: str = "digits", seed: int = 0,
             data_dir: str | None = None, progress: bool = True,
             backend_choice: str | None = None) -> dict:
    """The whole golden set: the golden package's cases computed with the backend registry's
    host kernel, plus the real-gradient cases, which need the trained models of this layer."""
    from .backends import host_backend
    from .realgrads import real_specs

    be = host_backend(backend_choice)       # the one registry's host backend
    return generate_golden(
        out_dir, quick=quick, seed=seed, progress=progress, compress_layer=be.step,
        kernel_name=be.name,
        real_cases=lambda kernel: real_specs(real_source, seed, quick, kernel, data_dir))


def verify_main(argv: list[str]) -> int:
    """`gradblock verify`: sim.verify with the full quick golden set (real gradients included)
    as its default vectors."""
    from gradblock.sim.verify import verify_main as run_verify

    def quick_set(out) -> None:
        try:
            generate(out, quick=True, progress=False)
        except ImportError as e:
            raise UsageError(f"the quick golden set's real-gradient cases need torch ({e}); "
                             f"install the project's [torch] extra or pass --vectors DIR") from None

    return run_verify(argv, make_golden=quick_set)


def summary_table(cases: list[GoldenCase] | list[dict], results: list[CheckResult] | None = None
                  ) -> str:
    metas = [c.meta if isinstance(c, GoldenCase) else c for c in cases]
    status = {r.name: ("ok" if r.ok else "FAIL") for r in results or []}
    head = (f"{'case':<28} {'kind':<9} {'shape':<15} {'n':>6} {'R':>9} {'k_eff':>9} "
            f"{'satQ':>5} {'satF':>5} {'words':>6} {'ratio':>7}" + ("  check" if results else ""))
    lines = [head, "-" * len(head)]

    def cell(m, key):                      # a malformed entry shows "?" instead of crashing
        v = m.get(key, "?") if isinstance(m, dict) else "?"
        return "-" if v is None else v

    for m in metas:
        shape, n, words = cell(m, "shape"), cell(m, "n"), cell(m, "frame_words")
        shape = "x".join(str(d) for d in shape) if isinstance(shape, list) else str(shape)
        keff = cell(m, "k_eff")
        keff = f"{keff}/{cell(m, 'n_blocks')}" if keff != "-" else keff
        ratio = f"{n / words:.2f}" if isinstance(n, int) and isinstance(words, int) and words \
            else "-"
        R = cell(m, "range")
        R = f"{R:.3g}" if isinstance(R, (int, float)) else str(R)
        line = (f"{str(cell(m, 'name')):<28} {str(cell(m, 'kind')):<9} {shape:<15} {str(n):>6} "
                f"{R:>9} {str(keff):>9} {str(cell(m, 'sat_quant')):>5} "
                f"{str(cell(m, 'sat_feedback')):>5} {str(words):>6} {ratio:>7}")
        if results:
            line += f"  {status.get(cell(m, 'name'), '?')}"
        lines.append(line)
    return "\n".join(lines)


def exchange_table(entries: list[dict], results: list[CheckResult] | None = None) -> str:
    """The exchange cases (N worker frames -> int64 sums): workers, n, frame words, outcome."""
    status = {r.name: ("ok" if r.ok else "FAIL") for r in results or []}
    head = (f"{'exchange case':<28} {'workers':>7} {'n':>6} {'words':>7}  outcome"
            + ("  check" if results else ""))
    lines = [head, "-" * len(head)]
    for m in entries:
        err = m.get("error")
        outcome = "sums" if err is None else f"{err['name']} (worker {err['worker']})"
        line = (f"{m['name']:<28} {m['n_workers']:>7} {m['n']:>6} {sum(m['frame_words']):>7}  "
                f"{outcome}")
        if results:
            line += f"  {status.get(m['name'], '?')}"
        lines.append(line)
    return "\n".join(lines)


def golden_main(argv: list[str]) -> int:
    from .realgrads import REAL_SOURCES

    p = UsageParser(prog="gradblock golden",
                                description="write golden vectors for the RTL testbenches "
                                            "(docs/golden.md) and check them against the numpy "
                                            "reference")
    p.add_argument("out_dir", help="golden directory to write (or to check with --check)")
    p.add_argument("--quick", action="store_true",
                   help="synthetic cases plus a couple of small real layers (simulator tests)")
    p.add_argument("--real-source", choices=REAL_SOURCES, default="digits",
                   help="data for the real gradients (default digits)")
    p.add_argument("--data-dir", default=None, help="Fashion-MNIST IDX directory override")
    p.add_argument("--seed", type=int, default=0, help="seed for synthetic data and training")
    p.add_argument("--check", action="store_true",
                   help="only check an existing golden directory against the reference")
    p.add_argument("--no-check", action="store_true", help="skip the check after writing")
    args = p.parse_args(argv)
    try:
        if args.check:
            cases = load_golden(args.out_dir)
            exchange = [c.meta for c in load_exchange(args.out_dir)]
        else:
            manifest = generate(args.out_dir, quick=args.quick, real_source=args.real_source,
                                seed=args.seed, data_dir=args.data_dir)
            cases = manifest["cases"]
            exchange = manifest.get("exchange", [])
            print(f"wrote {len(cases)} cases to {args.out_dir} ({manifest['generator']})")
        results = None if args.no_check and not args.check else check_golden(args.out_dir)
    except OSError as e:
        raise GoldenError(f"{e.filename or args.out_dir}: {e.strerror or e}") from None
    except ImportError as e:
        raise UsageError(f"the real-gradient cases need torch ({e}); install the "
                         f"project's [torch] extra") from None
    print(summary_table(cases, results))
    if exchange:
        print()
        print(exchange_table(exchange, results))
    if results is None:
        return 0
    bad = [r for r in results if not r.ok]
    for r in bad:
        for problem in r.problems:
            print(f"FAIL {r.name}: {problem}")
    print(f"check against the numpy reference: {len(results) - len(bad)} of {len(results)} "
          f"cases pass")
    return 1 if bad else 0
