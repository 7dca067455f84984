"""The command line: ``fedpart run | compare | sweep | list | partition | report | cost | bench``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fedpart.errors import FedpartError, OneLineParser
from fedpart.errors import one_line as _one_line


def _split_args(config: str | None, rest: list[str]) -> tuple[str | None, list[str]]:
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *rest]
    return config, rest


def cmd_run(args: argparse.Namespace) -> int:
    from fedpart.api import output_path, resume
    from fedpart.config import load_config
    from fedpart.engine.simulation import Simulation

    config, overrides = _split_args(args.config, args.overrides)
    if args.resume:
        if config is not None:
            raise FedpartError("give either CONFIG or --resume DIR, not both")
        result = resume(args.resume, overrides, quiet=args.quiet)
    else:
        if config is None:
            raise FedpartError(
                "missing CONFIG: fedpart run CONFIG [key=value ...] (or --resume DIR)"
            )
        cfg = load_config(config, overrides)
        out = output_path(cfg)
        sim = Simulation(cfg, run_dir=out, quiet=args.quiet)
        if not args.quiet:
            print(f"run directory: {out}", file=sys.stderr)
            print(f"backend: {sim.backend_description()}", file=sys.stderr)
        result = sim.run()
    s = result.summary
    acc = s["accuracy"]
    # in % with two decimals, the unit of the compare, sweep and report tables
    line = (
        f"{s['algorithm']} on {s['dataset']}: accuracy final {_pct(acc['final'])}, "
        f"best {_pct(acc['best'])} (round {_num(acc['best_round'])}), "
        f"weighted {_pct(s['accuracy_weighted']['final'])}"
    )
    if "global_accuracy" in s:
        line += f", global {_pct(s['global_accuracy']['final'])}"
    print(line)
    print(f"results in {result.run_dir}")
    return 0


def _pct(value: object) -> str:
    """An accuracy (a fraction) as a percentage for the result line; ``-`` where there is none."""
    return f"{100 * value:.2f}%" if isinstance(value, int | float) else "-"


def _num(value: object) -> str:
    """A summary number for the result line; ``-`` where there is none (e.g. zero rounds)."""
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _compare_job(config: str, overrides: list[str], run_dir: str) -> dict[str, object]:
    """One run of ``fedpart compare``, always from round 0 (a top-level function, so worker
    processes can run it); its outcome as :func:`fedpart.sweep.run_job` reports one."""
    from fedpart.api import run_into

    try:
        run_into(config, overrides, run_dir, quiet=True)
    except FedpartError as exc:
        return {"state": "failed", "error": str(exc)}
    return {"state": "finished"}


def _uses_field(template: str, field: str) -> bool:
    """Whether the ``output.dir`` template fills in ``{field}`` (``{{field}}`` is a literal
    ``{field}``); False for a template that does not parse (``output_path`` names the error)."""
    import string

    try:
        return any(
            name is not None and name.split(".")[0].split("[")[0] == field
            for _, name, _, _ in string.Formatter().parse(template)
        )
    except ValueError:
        return False


def cmd_compare(args: argparse.Namespace) -> int:
    from fedpart.api import output_path
    from fedpart.config import load_config
    from fedpart.registry import methods
    from fedpart.report import write_report
    from fedpart.tracking.run_dir import RunDir

    base = load_config(args.config, args.overrides)
    ALGORITHMS = methods()
    names = (
        args.algorithms.split(",")
        if args.algorithms
        else [n for n, cls in ALGORITHMS.items() if cls.supports(base)]
    )
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        raise FedpartError(
            f"--algorithms: unknown algorithm '{unknown[0]}'; valid choices: {', '.join(sorted(ALGORITHMS))}"
        )
    output_path(base, stamp=args.stamp)  # a bad placeholder: named in the template as given
    out_template = (
        base.output.dir
        if _uses_field(base.output.dir, "algorithm")
        else base.output.dir + "/{algorithm}"
    )
    jobs = []
    for name in names:
        out = output_path(base, out_template, algorithm=name, stamp=args.stamp)
        # the run goes into ``out`` as it is (its braces filled in once, here): set, not parsed
        cfg = base.with_overrides([f"algorithm.name={name}"])
        if not cfg.output.overwrite:
            RunDir(out).prepare(False)  # an occupied directory fails before any run starts
        jobs.append((name, cfg, out))
    from fedpart.sweep import Job, Progress, execute

    if args.jobs < 1:
        raise FedpartError(f"compare: --jobs must be >= 1, got {args.jobs}")
    runs = [
        Job(
            name,
            cfg.seed,
            out,
            [*args.overrides, f"algorithm.name={name}"],
            cfg.federation.rounds,
        )
        for name, cfg, out in jobs
    ]
    if not args.quiet:
        where = os.path.commonpath([str(out.resolve()) for _, _, out in jobs])
        print(f"{len(runs)} runs into {where}", file=sys.stderr)
    with Progress(runs, enabled=not args.quiet, label="compare") as progress:
        outcomes = execute(
            runs,
            args.config,
            workers=args.jobs,
            on_done=progress.run_ended,
            runner=_compare_job,
            skip_finished=False,
        )
    done = [out for _, _, out in jobs if outcomes[out].get("state") == "finished"]
    if done:
        # the table and the plots, as ``fedpart report`` makes them, in the runs' common folder
        where = Path(os.path.commonpath([str(d.resolve()) for d in done]))
        table, written = write_report(done, where if len(done) > 1 else where.parent)
        _print_shared(done)
        print(table)
        print(f"runs: {where}", file=sys.stderr)
        print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
        print(f"again: fedpart report {where}", file=sys.stderr)
    failed = [(name, outcomes[out]) for name, _, out in jobs if out not in done]
    if failed:
        name, outcome = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise FedpartError(f"compare: {name} failed{more}: {outcome.get('error')}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedpart.sweep import parse_seeds, run_sweep

    if args.jobs < 1:
        raise FedpartError(f"sweep: --jobs must be >= 1, got {args.jobs}")
    seeds = parse_seeds(args.seeds)
    sweep, table = run_sweep(
        args.config,
        args.overrides,
        seeds,
        out=args.out,
        jobs=args.jobs,
        ray_address=args.ray_address,
        quiet=args.quiet,
    )
    print(table)
    print(
        f"sweep folder: {sweep.path} (sweep.json, table.md, table.csv); "
        f"rerun the same command to resume",
        file=sys.stderr,
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from fedpart.data.partition import PARTITIONS
    from fedpart.data.registry import DATASETS
    from fedpart.models import MODELS
    from fedpart.registry import methods

    ALGORITHMS = methods()  # the built-in methods and every plugin's

    what = args.what
    if what in (None, "algorithms"):
        print("algorithms:")
        for name, cls in sorted(ALGORITHMS.items()):
            opts = ", ".join(cls.option_docs()) or "-"
            print(
                f"  {name:<12} [{cls.setting}; backends: {', '.join(cls.backends)}] {cls.summary}"
                f" options: {opts}"
            )
    if what in (None, "datasets"):
        print("datasets:")
        for name, info in sorted(DATASETS.items()):
            offline = " (offline)" if info.offline else ""
            print(f"  {name:<12} {info.description}{offline}")
    if what in (None, "models"):
        print("models:")
        for name, info in sorted(MODELS.items()):
            opts = ", ".join(info.options) or "-"
            print(f"  {name:<12} {info.description} options: {opts}")
    if what in (None, "partitions"):
        print("partitions:")
        for name, doc in sorted(PARTITIONS.items()):
            print(f"  {name:<16} {doc}")
    if what in (None, "topologies"):
        from fedpart.topology import TOPOLOGIES, WEIGHTS

        print("topologies (decentralized methods; topology.name):")
        print(f"  {'auto':<12} the method's default graph (a server for centralized methods)")
        for name, info in TOPOLOGIES.items():
            print(f"  {name:<12} {info.doc}")
        print("mixing weights (topology.weights):")
        for name, doc in WEIGHTS.items():
            print(f"  {name:<12} {doc}")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from fedpart.config import load_config
    from fedpart.data.partition import describe_partition, plot_label_matrix
    from fedpart.data.registry import load_dataset
    from fedpart.engine.data import build_federated_data

    cfg = load_config(args.config, args.overrides)
    bundle = load_dataset(
        cfg.dataset.name, cfg.dataset.root, download=cfg.dataset.download, **cfg.dataset.options
    )
    data = build_federated_data(cfg, bundle)
    for split in ("train", "test"):
        matrix = data.label_matrix(split)
        print(f"== {split} split ==")
        print(describe_partition(matrix))
    png = (
        Path(args.out)
        if args.out
        else _runs_root(cfg.output.dir) / f"partition-{cfg.dataset.name}-{cfg.partition.kind}.png"
    )
    png.parent.mkdir(parents=True, exist_ok=True)
    plot_label_matrix(
        data.label_matrix("train"),
        png,
        title=f"{cfg.dataset.name}, {cfg.partition.kind}, {cfg.partition.num_clients} clients",
    )
    print(f"label matrix plot: {png}")
    return 0


def _runs_root(output_dir: str) -> Path:
    """The fixed part of ``output.dir`` before its first placeholder (``runs`` for
    ``runs/quickstart-{time}/{algorithm}``): where a config's runs go, and its partition plot."""
    parts = []
    for part in Path(output_dir).parts:
        if "{" in part:
            break
        parts.append(part)
    return Path(*parts) if parts else Path("runs")


def _print_shared(paths: list) -> None:
    """Above a comparison table: what every run shares (what differs is in the table)."""
    from fedpart.report.compare import shared_setup

    shared = shared_setup(paths)
    if shared:
        print(f"{shared}\n")


def cmd_report(args: argparse.Namespace) -> int:
    from fedpart.report import write_report

    table, written = write_report(args.dirs, args.out)
    _print_shared(args.dirs)
    print(table)
    print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    from fedpart.cost_report import cost_lines, request_from

    config, overrides = _split_args(args.config, args.overrides)
    cfg = None
    if config is not None:
        from fedpart.config import load_config

        cfg = load_config(config, overrides)
    elif overrides:
        raise FedpartError("cost: key=value overrides need a CONFIG")
    if args.threads < 1:
        raise FedpartError(f"cost: --threads must be >= 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    req = request_from(
        config=cfg,
        method=args.method,
        width=args.width,
        ratio=args.ratio,
        batch=args.batch,
        variant=args.variant,
        memory=not args.no_memory,
    )
    print("\n".join(cost_lines(req)))
    return 0


def _report(exc: BaseException) -> int:
    """Print a user-caused error as one line on stderr; its exit code."""
    if isinstance(exc, FedpartError):
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    assert isinstance(exc, OSError)
    # the file system refused (a full disk, a read-only or missing directory): name it
    where = f": {exc.filename}" if exc.filename else ""
    print(f"error: {_one_line(exc.strerror or str(exc))}{where}", file=sys.stderr)
    return 2


PLUGIN_HELP = (
    "a module (or .py file) registering your own datasets, models or methods, imported first "
    "and recorded in the run's config.yaml (repeatable; docs/extending.md)"
)


def _take_plugins(argv: list[str]) -> tuple[list[str], list[str]]:
    """``--plugin MODULE`` / ``--plugin=MODULE`` anywhere before ``--``: (plugins, the rest)."""
    plugins, rest, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        if arg == "--plugin":
            if i + 1 >= len(argv):
                raise FedpartError("--plugin: expected a module name or a .py file")
            plugins.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            plugins.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return plugins, rest


def build_parser() -> argparse.ArgumentParser:
    import time

    parser = OneLineParser(prog="fedpart", description=__doc__)
    parser.add_argument("--plugin", metavar="MODULE", action="append", help=PLUGIN_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run one experiment")
    p.add_argument("config", nargs="?", help="YAML config")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    p.add_argument(
        "--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="run one config for several algorithms and print a table")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--algorithms", help="comma-separated names (default: every applicable method)")
    p.add_argument(
        "--jobs", type=int, default=2, help="runs in parallel, one process each (default 2)"
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_compare, stamp=time.strftime("%Y%m%d-%H%M%S"))

    p = sub.add_parser(
        "sweep",
        help="a grid of overrides x seeds, in parallel and resumable: mean ± std table",
    )
    p.add_argument("config")
    p.add_argument(
        "overrides",
        nargs="*",
        help="key=v1,v2,... (one grid axis per key; one value: a fixed override)",
    )
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    p.add_argument(
        "--jobs", type=int, default=2, help="runs in parallel, one process each (default 2)"
    )
    p.add_argument(
        "--out", help="sweep folder (default: runs/sweep-<config>-<digest of config and fixed>)"
    )
    p.add_argument(
        "--ray-address",
        help="run each run as a Ray task on this cluster (auto, ray://host:10001; local: a Ray "
        "started here); default engine.ray_address",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_sweep)

    sub.add_parser(
        "bench",
        help="performance harness: naive loop vs sequential vs batched vs a centralized "
        "ceiling; --device cuda: sequential vs batched vs ceiling on a GPU (fedpart bench --help)",
        add_help=False,
    )

    p = sub.add_parser("list", help="list algorithms, datasets, models, partitions, topologies")
    p.add_argument(
        "what",
        nargs="?",
        choices=["algorithms", "datasets", "models", "partitions", "topologies"],
    )
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "partition", help="show a config's partition and plot its client x label matrix"
    )
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument(
        "--out",
        help="PNG path (default: partition-<dataset>-<kind>.png in the fixed part of output.dir, "
        "e.g. runs/)",
    )
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("report", help="compare finished runs: markdown table and PNG plots")
    p.add_argument(
        "dirs",
        nargs="+",
        help="run directories, or folders holding runs (a sweep or compare folder)",
    )
    p.add_argument("--out", help="directory for the plots (default: the runs' common parent)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "cost",
        help="one client's forward FLOPs, model size and peak training memory by method and "
        "width (Pa3dFL Tables 2 and 8)",
    )
    p.add_argument("config", nargs="?", help="YAML config (method, batch size, widths)")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    p.add_argument(
        "--method",
        help="fedavg, p-width, heterofl, fedrolex, fjord, tailorfl, "
        "flanc, pa3dfl, pfedgate or all (default: the config's, else all)",
    )
    p.add_argument("--width", type=float, help="width p, a multiple of 1/16")
    p.add_argument("--ratio", type=float, help="capacity ratio r (width max(1/16, ⌊16√r⌋/16))")
    p.add_argument("--batch", type=int, help="batch size (default: the config's, else 128)")
    p.add_argument("--variant", help="cifar100 or fmnist (default: the config's, else cifar100)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory training step")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.set_defaults(func=cmd_cost)
    for name, command in sub.choices.items():
        if name != "bench":  # the harness lists its own options (fedpart bench --help)
            command.add_argument("--plugin", metavar="MODULE", action="append", help=PLUGIN_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fedpart`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # the command line's main module is import-safe for spawned worker processes: here
    # ``engine.backend=auto`` may run them (``backends.resolve_backend``)
    os.environ.setdefault("FEDPART_AUTO_WORKERS", "1")
    try:
        # on every subcommand: imported before anything is resolved (fedpart.plugins)
        plugins, argv = _take_plugins(argv)
        if plugins:
            from fedpart.plugins import use

            use(plugins)
    except FedpartError as exc:
        return _report(exc)
    if argv[:1] == ["bench"]:  # the harness parses its own options
        from fedpart.bench.cli import main as bench_main

        try:
            return bench_main(argv[1:])
        except (FedpartError, OSError) as exc:
            return _report(exc)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed as one line (2)
        return int(exc.code or 0)
    try:
        return args.func(args)
    except (FedpartError, OSError) as exc:
        return _report(exc)
    except KeyboardInterrupt:
        if args.command == "sweep":  # its runs resume from their checkpoints when run again
            print("\ninterrupted; run the same command again to resume the sweep", file=sys.stderr)
            return 130
        print(
            "interrupted; continue with 'fedpart run --resume DIR' from the last checkpoint",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
