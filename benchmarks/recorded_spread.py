"""How far other CPUs' rounding moves the numbers that ``tests/test_recorded_numbers.py`` checks.

    python benchmarks/recorded_spread.py            # measure on this machine, write the record
    python benchmarks/recorded_spread.py --report   # print the table of the record

Every recorded-number test reruns the first rounds of one recorded run (``tests/recorded_runs.py``)
and compares it with the record. A machine of another CPU computes the same arithmetic with other
kernels — oneDNN's convolutions, MKL's matrix products and ATen's vectorised loops each dispatch
on the instruction sets the CPU has — and rounds differently. This script reruns every test's
run in a fresh process under each instruction-set setting below, on this machine, and records
each number's deviation from the record (in the unit the test compares it in), round by round,
then once more with the deliberate change each test must catch (``recorded_runs.PERTURBATIONS``).

The record, ``tests/recorded_spread.json``, is what each test's tolerance is set from
(``test_recorded_numbers.py``: ``TOLERANCES`` and the rule that checks them against it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "recorded_spread.json"

#: instruction-set settings: each makes this machine round as a CPU with only that set would
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "onednn+mkl avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "aten avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "all avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
    },
    "all avx / default": {
        "ONEDNN_MAX_CPU_ISA": "AVX",
        "MKL_ENABLE_INSTRUCTIONS": "AVX",
        "ATEN_CPU_CAPABILITY": "default",
    },
}
ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def child(perturb: bool, only: list[str]) -> None:
    """In a fresh process: every rerun's deviations as one JSON line on stdout."""
    sys.path.insert(0, str(ROOT / "tests"))
    import torch

    import recorded_runs as rr
    from fedpart.engine.placement import cpu_record

    out: dict = {"cpu": cpu_record(), "aten": torch.backends.cpu.get_cpu_capability(), "runs": {}}
    for name, (dataset, rerun) in rr.RERUNS.items():
        if only and name not in only:
            continue
        if not rr.have(dataset):
            print(f"skip {name}: no {dataset} in {rr.DATA}", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        out["runs"][name] = rerun(rr.PERTURBATIONS[name] if perturb else 0.0).deviations()
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps(out))


def measure(setting: str, perturb: bool, only: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    env.update(SETTINGS[setting])
    cmd = [sys.executable, __file__, "--child", *(["--perturb"] if perturb else [])]
    cmd += [a for name in only for a in ("--only", name)]
    print(f"{setting}{' (perturbed)' if perturb else ''} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"recorded_spread: {setting} failed: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _merged(old: dict | None, where: tuple[str, ...], new: dict) -> dict:
    """``new``'s runs over those of the same place in the ``old`` record (``--only``)."""
    if old is None:
        return new
    for key in where:
        old = old.get(key, {})
    return {**new, "runs": {**old.get("runs", {}), **new["runs"]}}


def report(record: dict) -> str:
    """One row per (run, key, round): each setting's deviation and the perturbed run's."""
    names = list(record["settings"])
    lines = [
        "| run | number | round | " + " | ".join(names) + " | changed lr |",
        "| --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- |",
    ]
    perturbed = record["perturbed"]["runs"]
    for run, keys in record["settings"][names[0]]["runs"].items():
        for key, values in keys.items():
            for i in range(len(values)):
                cells = [f"{record['settings'][s]['runs'][run][key][i]:.3g}" for s in names]
                cells.append(f"{perturbed[run][key][i]:.3g}")
                lines.append(f"| {run} | {key} | {i} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="print the record's table, run nothing")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--perturb", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--only", action="append", default=[], help="one rerun (repeatable)")
    ap.add_argument(
        "--perturbed-only",
        action="store_true",
        help="rerun only the changed computations, into the existing record",
    )
    args = ap.parse_args()
    if args.child:
        child(args.perturb, args.only)
        return
    if args.perturbed_only:
        sys.path.insert(0, str(ROOT / "tests"))
        import recorded_runs

        record = json.loads(OUT.read_text())
        record["perturbed"] = measure("default", True, args.only)
        record["perturbations"] = recorded_runs.PERTURBATIONS
        OUT.write_text(json.dumps(record, indent=1) + "\n")
    elif not args.report:
        record = {
            "machine": {"platform": platform.platform(), "python": platform.python_version()},
            "command": "python benchmarks/recorded_spread.py",
            "settings": {},
        }
        old = json.loads(OUT.read_text()) if args.only and OUT.is_file() else None
        for setting in SETTINGS:
            record["settings"][setting] = {
                "env": SETTINGS[setting],
                **_merged(old, ("settings", setting), measure(setting, False, args.only)),
            }
        record["perturbed"] = _merged(old, ("perturbed",), measure("default", True, args.only))
        sys.path.insert(0, str(ROOT / "tests"))
        import recorded_runs

        record["perturbations"] = recorded_runs.PERTURBATIONS
        OUT.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    print(report(json.loads(OUT.read_text())))


if __name__ == "__main__":
    main()
