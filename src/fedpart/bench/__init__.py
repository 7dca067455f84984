"""``fedpart bench``: fedpart's engine against a library-style FL loop and a centralized ceiling.

For each workload, four variants run one after the other in this process, on the same
:class:`~fedpart.engine.data.FederatedData` (built once, outside the measurements) and seed:

``naive``
    :class:`fedpart.bench.naive.NaiveFederation`: model deep copies, ``DataLoader``\\ s,
    ``torch.optim.SGD`` per client and round, state-dict averaging, full per-client copies,
    and per-client evaluation of every client every round (the PFLlib / FL-bench way).
``sequential`` / ``batched``
    fedpart's :class:`~fedpart.engine.simulation.Simulation` with ``engine.backend`` set so;
    ``run_round`` (local training + aggregation) and ``evaluate`` (every client) are timed.
    Where the method or model cannot be batched the row says why (``auto`` then runs
    sequentially).
``ceiling``
    :class:`fedpart.bench.naive.CentralCeiling`: one model, one SGD loop over an in-memory
    tensor, on as many samples per round as the federation trains, with batch size
    (clients per round) x (local batch size); no evaluation.

The variants are set up one after the other, each with a warm-up round (round 0); then the
``--repeats`` timed rounds run interleaved (round ``r`` of every variant before round ``r + 1``
of any, the first variant rotating), so that the slow spells of a shared machine fall on all
variants alike; the report gives medians (``time.perf_counter``). Memory: a background thread
samples the process's resident set (``/proc/self/statm``) every 10 ms during each variant's set-up
and warm-up round; the report gives the peak minus the RSS just before it (the variant's own
increment) and the absolute peak (which includes the variants set up before it). Freed memory is
handed back to the OS (``malloc_trim``) before each variant so that leftovers do not hide it.

After the timed rounds, each variant runs its last round once more, untimed, under a
:class:`~fedpart.bench.dispatch.DispatchCounter`: the report's *ops/round* and *syncs/round*
(``--counts false`` skips it; the process backend's work, in its workers, is not counted).

The ``scale1000`` workload runs one FedPer round of the default backend with 1,000 clients
(10% participation) and evaluates all of them, reporting time and peak memory only.

``--device cuda`` (or ``cuda:N``) runs the FedAvgCNN workloads (FedAvg, FedPer, FedRep, DFedPGP
by default) on that GPU with the ``sequential``, ``batched`` and ``ceiling`` variants (the naive
loop and the process backend are CPU designs and are left out): the engine runs with
``engine.device`` set to the device, the ceiling's model and samples are moved onto it, and every
timer is read after ``torch.cuda.synchronize()``. Memory is then GPU memory
(``torch.cuda.max_memory_allocated``, its peak reset before each measurement): the increment of
each variant's set-up and warm-up round, the working memory of its timed rounds (peak minus what
was allocated when the round began) and the absolute peak (which also holds the variants set up
before it). The report adds batched / sequential and batched / ceiling ratios and the GPU targets
(:func:`~fedpart.bench.ratios.gpu_targets`). Without a usable GPU the command stops before any work with one line
(:func:`~fedpart.bench.devices.check_device`, a :class:`~fedpart.errors.FedpartError`: exit code 2).

The modules: :mod:`~fedpart.bench.workloads` (the workloads and the parsed options),
:mod:`~fedpart.bench.memory` and :mod:`~fedpart.bench.devices` (what is measured, and where),
:mod:`~fedpart.bench.dispatch` (the ATen operators and host synchronisations of a round),
:mod:`~fedpart.bench.measure` (the runners, the interleaved rounds and the counted round),
:mod:`~fedpart.bench.ratios` (speed ratios, notes, GPU targets), :mod:`~fedpart.bench.running`
(a workload's variants; :func:`~fedpart.bench.running.run_bench` returns the measurements as
data), :mod:`~fedpart.bench.report` (the markdown report), :mod:`~fedpart.bench.cli`
(:func:`~fedpart.bench.cli.main`, the entry point: ``main(argv) -> int``) and
:mod:`fedpart.bench.naive` (the baselines: the library-style loop and the centralized ceiling).
Imported lazily; ``python -m fedpart.bench`` is ``fedpart bench``.
"""

from typing import Any

__all__ = ["main", "run_bench"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from fedpart.bench.cli import main

        return main
    if name == "run_bench":
        from fedpart.bench.running import run_bench

        return run_bench
    raise AttributeError(f"module 'fedpart.bench' has no attribute {name!r}")
