"""Channels-last vs contiguous (NCHW) convolutions, per model of the zoo, on this machine.

For each model: the median time of a fixed number of SGD steps (training) and of one forward pass
of 256 samples (evaluation) in both layouts, interleaved (A, B, B, A, ...) so that a slow spell
of a shared machine falls on both, printed as the ratio channels-last / contiguous (below 1:
channels-last is faster). Random inputs of each model's usual shape and batch size; the numbers
are the arithmetic of the layers, not of any data. This is the measurement behind each model's
``channels_last_on_cpu`` (what ``engine.conv_layout=auto`` picks on the CPU).

    python benchmarks/conv_layout.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fedpart.models import build_model

#: (model, input shape, options, batch size, training steps per timing)
CASES = [
    ("fedavgcnn", (1, 28, 28), {}, 10, 60),
    ("uapdfl_cnn", (1, 28, 28), {}, 10, 60),
    ("lenet5", (1, 28, 28), {}, 32, 60),
    ("pa3dfl_cnn", (3, 32, 32), {}, 32, 20),
    ("vgg11", (3, 32, 32), {}, 32, 3),
    ("resnet18", (3, 32, 32), {}, 32, 3),
    ("resnet18", (3, 32, 32), {"norm": "gn"}, 32, 3),
]


def ratios(name: str, shape: tuple[int, ...], options: dict, batch: int, steps: int, reps: int):
    torch.manual_seed(0)
    model = build_model(name, num_classes=10, input_shape=shape, **options)
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
    x_eval = torch.randn(256, *shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train: dict[bool, list[float]] = {False: [], True: []}
    evaluate: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps):
        for layout in (False, True) if rep % 2 == 0 else (True, False):
            model.set_channels_last(layout)
            model.train()
            t0 = time.perf_counter()
            for _ in range(steps):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            train[layout].append(time.perf_counter() - t0)
            model.eval()
            with torch.no_grad():
                t0 = time.perf_counter()
                model(x_eval)
                evaluate[layout].append(time.perf_counter() - t0)
    med = statistics.median
    return med(train[True]) / med(train[False]), med(evaluate[True]) / med(evaluate[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=4, help="timings per layout (default 4)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); time ratio channels-last / NCHW")
    print("| model | batch | training | evaluation (256) | channels_last_on_cpu |")
    print("| --- | --- | --- | --- | --- |")
    for name, shape, options, batch, steps in CASES:
        tr, ev = ratios(name, shape, options, batch, steps, args.repeats)
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        model = build_model(name, num_classes=10, input_shape=shape, **options)
        print(f"| {label} | {batch} | {tr:.2f} | {ev:.2f} | {model.channels_last_on_cpu} |")


if __name__ == "__main__":
    main()
