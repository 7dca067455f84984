"""The sequential trainer's SGD update without momentum, timed: ``p − lr·d`` with ``lr·d`` in a
new list of tensors (before) or scaled in the step's own directions (now, ``fedpart.engine.
training.sgd_step``). The same roundings; the difference is the model-sized temporary. Sizes:
pfl-research's ``simple_cnn`` (6.5 M parameters), one thread, fresh directions each step (as
autograd gives them); medians of 30 steps, twice.

    python benchmarks/sgd_update.py
"""

from __future__ import annotations

import time

import torch

SHAPES = [(32, 3, 3, 3), (32,), (64, 32, 3, 3), (64,), (128, 12544), (128,), (10, 128), (10,)]


def main() -> None:
    torch.set_num_threads(1)
    params = [torch.randn(s) for s in SHAPES]

    def before() -> float:
        d = [torch.randn(s) for s in SHAPES]
        t0 = time.perf_counter()
        torch._foreach_sub_(params, torch._foreach_mul(d, 0.1))
        return time.perf_counter() - t0

    def now() -> float:
        d = [torch.randn(s) for s in SHAPES]
        t0 = time.perf_counter()
        torch._foreach_mul_(d, 0.1)
        torch._foreach_sub_(params, d)
        return time.perf_counter() - t0

    for _ in range(2):
        for name, step in (("a new list (before)", before), ("in place (now)", now)):
            step()
            times = sorted(step() for _ in range(30))
            print(f"{name}: median {times[15] * 1e3:.2f} ms a step")


if __name__ == "__main__":
    main()
