"""Whether ``index_add_`` gives the in-order average's roundings on a device.

``fedpart.engine.mixing.average_states_in_order`` adds the weighted uploads one after another
(``acc = acc + w_j·x_j``), two operators per client (a ``_foreach_mul`` and a ``_foreach_add_``
over its tensors) on every device. One ``index_add_`` of the stacked products would be one
operator for all clients, and its documented semantics add the rows in the order of the index;
the CPU kernel does (bit for bit here), but a CUDA ``index_add_`` adds with atomics, and under
``torch.use_deterministic_algorithms(True)`` goes through a sort whose order among equal indices
this script checks: it compares ``index_add_`` with the loop, bit for bit, on values spread over
twelve orders of magnitude (where another order shows), and prints one line per case.

It then checks the engine's own fold (``fedpart.engine.mixing``: every client's tensors as one
row of a matrix, one ``index_add_``; what the engine uses on CUDA under its deterministic
switches) against the engine's loop, on states shaped like FedAvgCNN's (1.66 M values).

    python benchmarks/fold_check.py --device cuda
    python benchmarks/fold_check.py --time      # the loop against index_add_ (stacked), timed
"""

from __future__ import annotations

import argparse
import time

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


def timed(device: torch.device) -> None:
    """Milliseconds per average of n uploads of a 6.4-MB layer (one thread): the loop as the
    engine runs it against one ``index_add_`` of the stacked products."""
    torch.set_num_threads(1)
    for n in (10, 50):
        uploads = [torch.randn(1_605_632, device=device) for _ in range(n)]
        w = torch.full((n,), 1.0 / n, device=device)
        cases = {
            "loop": lambda u=uploads, w=w: loop(u, w),
            "index_add_ (stacked)": lambda u=uploads, w=w: fold(torch.stack(u), w),
        }
        for name, fn in cases.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(5):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            print(f"{n} uploads, {name}: {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--time", action="store_true", help="time the two instead")
    args = p.parse_args()
    dev = torch.device(args.device)
    if args.time:
        timed(dev)
        return
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
    torch.use_deterministic_algorithms(True)
    engine_fold(dev, gen)
    torch.use_deterministic_algorithms(False)


def engine_fold(dev: torch.device, gen: torch.Generator) -> None:
    """The engine's average folded (as on CUDA under deterministic algorithms) against its loop,
    on FedAvgCNN-shaped states with values over twelve orders of magnitude."""
    from fedpart.engine import mixing

    shapes = {"c1.w": (32, 1, 5, 5), "c1.b": (32,), "c2.w": (64, 32, 5, 5), "c2.b": (64,)}
    shapes |= {"f1.w": (512, 3136), "f1.b": (512,), "f2.w": (10, 512), "f2.b": (10,)}
    keys = list(shapes)
    for n in (10, 50):
        states = []
        for _ in range(n):
            scale = 10.0 ** torch.randint(-6, 6, (1,), generator=gen).item()
            states.append(
                {k: (torch.randn(s, generator=gen) * scale).to(dev) for k, s in shapes.items()}
            )
        w = torch.rand(n, generator=gen, dtype=torch.float64)
        w = w / w.sum()
        folded = {}
        for devices in (frozenset({"cpu", "cuda"}), frozenset()):
            mixing.FOLD_DEVICES = devices
            folded[bool(devices)] = mixing.average_states_in_order(states, w, keys)
        same = all(torch.equal(folded[True][k], folded[False][k]) for k in keys)
        print(f"{dev} engine fold == engine loop, {n} FedAvgCNN states: {same}")


if __name__ == "__main__":
    main()
