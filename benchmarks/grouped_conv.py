"""The grouped convolutions of the batched backend under each cuDNN setting and formulation.

The batched backend trains ``G`` clients' convolutions as ``vmap`` over ``conv2d``, which torch
runs as one grouped convolution (``groups=G``). This times forward + backward of FedAvgCNN's two
convolutions (``conv1`` 1->32 5x5 on 28x28, ``conv2`` 32->64 5x5 on 12x12; batch 10 per client)
for ``G`` clients, in these variants:

- ``vmap``: as the engine runs it, under ``engine.deterministic``'s cuDNN switches
  (deterministic, no benchmark: cuDNN's default algorithm), then with ``cudnn.benchmark`` on
  (autotuned among the deterministic algorithms), then non-deterministic with and without
  benchmark;
- ``grouped NHWC``: the same grouped convolution written out, in channels-last layout;
- ``unfold + bmm``: the patches unfolded (``F.unfold``) and one batched matrix product per
  layer: no cuDNN, deterministic by construction.

Each variant's output and weight gradient are compared with the first's (``max |diff| / max |first|``): cuDNN
algorithms and the matrix product sum in other orders, so the numbers agree to rounding, not bit
for bit. Random data; medians of ``--reps`` timed loops of ``--iters`` iterations.

    python benchmarks/grouped_conv.py --device cuda
    python benchmarks/grouped_conv.py --device cpu --clients 10 --iters 2   # dry run
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.func import vmap

LAYERS = [("conv1", 1, 32, 28), ("conv2", 32, 64, 12)]  # name, in, out, input size (k = 5)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _vmap_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return vmap(F.conv2d)(x, w, b)  # x [G, B, C, H, W], w [G, O, C, k, k]


def _grouped_nhwc(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    g, n, c, h, wd = x.shape
    o = w.shape[1]
    xg = x.transpose(0, 1).reshape(n, g * c, h, wd).contiguous(memory_format=torch.channels_last)
    wg = w.reshape(g * o, *w.shape[2:]).contiguous(memory_format=torch.channels_last)
    out = F.conv2d(xg, wg, b.reshape(-1), groups=g)
    return out.reshape(n, g, o, *out.shape[2:]).transpose(0, 1)


def _unfold_bmm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    g, n, c, h, wd = x.shape
    o, k = w.shape[1], w.shape[-1]
    cols = F.unfold(x.reshape(g * n, c, h, wd), k)  # [G*B, C*k*k, L]
    cols = cols.reshape(g, n, c * k * k, -1).transpose(1, 2).reshape(g, c * k * k, -1)
    out = torch.bmm(w.reshape(g, o, -1), cols) + b[:, :, None]  # [G, O, B*L]
    side = h - k + 1
    return out.reshape(g, o, n, side, side).transpose(1, 2)


def measure(fn, x, w, b, device, iters, reps):
    def once():
        ww = w.detach().requires_grad_(True)
        out = fn(x, ww, b)
        (gw,) = torch.autograd.grad(out.square().sum(), ww)
        return out.detach(), gw

    ref = once()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        _sync(device)
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times), ref


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", default="10,100")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    device = torch.device(args.device)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    cudnn = torch.backends.cudnn.version() if cuda else None
    print(
        f"# grouped convolutions: {name}, torch {torch.__version__}, cuDNN {cudnn}, "
        f"batch {args.batch} per client, TF32 off\n"
    )
    variants = [  # name, function, cudnn.deterministic, cudnn.benchmark
        ("vmap, deterministic (engine default)", _vmap_conv, True, False),
        ("vmap, deterministic + benchmark", _vmap_conv, True, True),
        ("vmap, non-deterministic", _vmap_conv, False, False),
        ("vmap, non-deterministic + benchmark", _vmap_conv, False, True),
        ("grouped NHWC, deterministic", _grouped_nhwc, True, False),
        ("grouped NHWC, deterministic + benchmark", _grouped_nhwc, True, True),
        ("unfold + bmm", _unfold_bmm, True, False),
    ]
    print("| G | layer | variant | ms fwd+bwd | vs default | max rel diff out / grad |")
    print("| --- | --- | --- | --- | --- | --- |")
    for g in [int(v) for v in args.clients.split(",")]:
        for layer, cin, cout, size in LAYERS:
            torch.manual_seed(0)
            x = torch.randn(g, args.batch, cin, size, size, device=device)
            w = torch.randn(g, cout, cin, 5, 5, device=device) * 0.1
            b = torch.randn(g, cout, device=device) * 0.1
            base = ref = None
            for label, fn, det, bench in variants:
                torch.backends.cudnn.deterministic = det
                torch.backends.cudnn.benchmark = bench
                try:
                    t, (out, gw) = measure(fn, x, w, b, device, args.iters, args.reps)
                except RuntimeError as exc:
                    print(f"| {g} | {layer} | {label} | failed: {str(exc).splitlines()[0]} | | |")
                    continue
                if base is None:
                    base, ref = t, (out, gw)
                diff = " / ".join(
                    f"{float((a - r).abs().max() / r.abs().max()):.1e}"
                    for a, r in ((out, ref[0]), (gw, ref[1]))
                )
                print(
                    f"| {g} | {layer} | {label} | {t * 1e3:.3f} | {t / base:.2f} | {diff} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
