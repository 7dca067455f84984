"""Whether ``index_add_`` gives the in-order average's roundings on a device.

``fedpart.engine.mixing.average_in_order`` adds the weighted uploads one after another
(``acc = acc + w_j·x_j``). On the CPU it does so with one ``index_add_`` (rows added in the order
of the index); on a GPU it keeps the loop, since ``index_add_`` there adds with atomics. Under
``torch.use_deterministic_algorithms(True)`` a CUDA ``index_add_`` takes a sorted, deterministic
path, which may add in order too: this script compares it with the loop, bit for bit, on values
spread over twelve orders of magnitude (where another order shows), and prints one line per case.

    python benchmarks/fold_check.py --device cuda
"""

from __future__ import annotations

import argparse

import torch


def loop(stacked: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    acc = stacked[0] * w[0]
    for j in range(1, len(stacked)):
        acc = acc + stacked[j] * w[j]
    return acc


def fold(stacked: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    part = stacked * w.view(-1, *[1] * (stacked.dim() - 1))
    acc = part[0].clone()
    index = torch.zeros(len(part) - 1, dtype=torch.long, device=part.device)
    acc.unsqueeze(0).index_add_(0, index, part[1:])
    return acc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        for n, shape in [(10, (512,)), (50, (64, 1024)), (200, (32, 5, 5))]:
            scale = 10.0 ** torch.randint(-6, 6, (n, *[1] * len(shape)), generator=gen)
            stacked = (torch.randn(n, *shape, generator=gen) * scale).to(dev)
            w = torch.rand(n, generator=gen).to(dev)
            same = [torch.equal(fold(stacked, w), loop(stacked, w)) for _ in range(3)]
            print(
                f"{dev} deterministic={deterministic} clients={n} shape={list(shape)}: "
                f"index_add_ == loop in {sum(same)} of 3 tries"
            )
    torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
