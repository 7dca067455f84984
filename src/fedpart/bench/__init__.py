"""``fedpart bench``: a performance harness comparing fedpart's engine with a naive FL loop.

:func:`fedpart.bench.harness.main` is the entry point (``main(argv) -> int``);
:func:`fedpart.bench.harness.run_bench` returns the measurements as data;
:mod:`fedpart.bench.naive` holds the baselines (the library-style loop and the centralized
ceiling). Imported lazily; ``python -m fedpart.bench`` is ``fedpart bench``.
"""

from typing import Any

__all__ = ["main", "run_bench"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedpart.bench import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'fedpart.bench' has no attribute {name!r}")
