"""``fedpart bench``: a performance harness comparing fedpart's engine with a naive FL loop.

:func:`fedpart.bench.harness.main` is the entry point (``main(argv) -> int``);
:mod:`fedpart.bench.naive` holds the baselines (the naive library-style loop and the
centralized ceiling).
"""

from fedpart.bench.harness import main, run_bench

__all__ = ["main", "run_bench"]
