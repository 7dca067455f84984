"""What a batched round costs when a step of all its clients is one captured device program.

The batched backend (:mod:`fedpart.engine.batched`) runs one step of ``G`` clients as
``vmap(grad(loss))`` plus one fused SGD update, launched from Python step by step. This script
takes exactly that step (:func:`fedpart.engine.batched_step.make_step` and
:func:`~fedpart.engine.batched_step.sgd_update`, the default recipe) on ``G`` clients of
FedAvgCNN with every client's data resident on the device and every step's batch indices drawn
up front, and times ``--steps`` steps three ways:

``eager``
    the step launched from Python each time (the batches gathered on the device by an index
    tensor: no host work but the launches);
``captured``
    on CUDA, the same step (gather, ``vmap(grad)``, update, loss accumulation) captured once in a
    ``torch.cuda.CUDAGraph`` and replayed ``--steps`` times (a device-side step counter selects
    each step's indices): one launch per step. The final parameters are compared with the eager
    run's (``max |diff|``): equal means the captured program computes the same numbers;
``ceiling``
    one model trained by plain SGD on batches of ``G x batch`` samples (the samples a step of the
    batched backend trains), eager and, on CUDA, captured: what one process can do on the same
    arithmetic.

It also times the evaluation of ``--eval-clients`` personalised models on ``--eval-per-client``
test samples each, one client after another against one ``vmap`` over all of them (one pass).

Random data of MNIST's shape (time does not depend on pixel values). On the CPU only the eager
rows run: the dry run of the script, and the per-step cost there.

    python benchmarks/captured_step.py --device cuda
    python benchmarks/captured_step.py --device cpu --clients 10 --steps 5   # dry run
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fedpart.engine.batched_step import make_step, sgd_update
from fedpart.engine.placement import configure_device
from fedpart.engine.recipe import Recipe
from fedpart.models import build_model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], None], device: torch.device, reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` runs (after one warm-up run)."""
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _capture(body: Callable[[], None], device: torch.device) -> torch.cuda.CUDAGraph:
    """``body`` captured in a CUDA graph (warmed up on a side stream first, as PyTorch asks)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph


def clients_case(g: int, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    torch.manual_seed(0)
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28)).to(device)
    keys = list(model.state_dict())
    start = {k: v.detach() for k, v in model.state_dict().items()}
    n, b, steps = args.per_client, args.batch, args.steps
    xs = torch.rand(g, n, 1, 28, 28, device=device)
    ys = torch.randint(0, 10, (g, n), device=device)
    gen = torch.Generator(device="cpu").manual_seed(1)
    index = torch.stack([torch.randint(0, n, (g, b), generator=gen) for _ in range(steps)])
    index = index.to(device)  # [steps, G, B]: every step's batches drawn up front
    rows = torch.arange(g, device=device)[:, None]
    step = make_step(model, Recipe(), 0, keys, False)
    lr = args.lr

    def fresh() -> dict[str, torch.Tensor]:
        return {
            k: v.unsqueeze(0).repeat(g, *([1] * v.dim())).contiguous() for k, v in start.items()
        }

    def one_step(params: dict[str, torch.Tensor], idx: torch.Tensor, acc: torch.Tensor) -> None:
        x, y = xs[rows, idx], ys[rows, idx]
        grads, losses = step(params, {}, x, y, (), ())
        sgd_update(list(params.values()), [grads[k] for k in params], [], 1, lr, 0.0, 0.0)
        acc.add_(losses)

    eager_params = fresh()
    acc_e = torch.zeros(g, device=device)

    def eager_round() -> None:
        for t in range(steps):
            one_step(eager_params, index[t], acc_e)

    out: dict[str, float] = {}
    out["eager s/step"] = _timed(eager_round, device, args.reps) / steps
    if device.type == "cuda":
        # the same number of steps from the same start, eager then captured, for the comparison
        check_e, check_c = fresh(), fresh()
        for t in range(steps):
            one_step(check_e, index[t], torch.zeros(g, device=device))
        params_c = fresh()
        acc_c = torch.zeros(g, device=device)
        counter = torch.zeros((), dtype=torch.long, device=device)

        def body() -> None:
            one_step(params_c, index.index_select(0, counter.view(1))[0], acc_c)
            counter.add_(1).remainder_(steps)

        try:
            graph = _capture(body, device)
        except RuntimeError as exc:  # a step that cannot be captured: say why, keep going
            print(f"capture failed (G={g}): {str(exc).splitlines()[0]}", flush=True)
            return out | {"samples/step": g * b}
        for k in params_c:  # the warm-up steps moved them: back to the start, counter to 0
            params_c[k].copy_(check_c[k])
        counter.zero_()

        def captured_round() -> None:
            for _ in range(steps):
                graph.replay()

        captured_round()
        _sync(device)
        out["captured max|diff| vs eager"] = max(
            float((params_c[k] - check_e[k]).abs().max()) for k in keys
        )
        out["captured s/step"] = _timed(captured_round, device, args.reps) / steps
    out["samples/step"] = g * b
    return out


def ceiling_case(g: int, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    torch.manual_seed(0)
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28)).to(device)
    params = [p for p in model.parameters()]
    big = g * args.batch
    x = torch.rand(big, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (big,), device=device)

    def one() -> None:
        loss = F.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            torch._foreach_add_(params, grads, alpha=-args.lr)

    def eager_round() -> None:
        for _ in range(args.steps):
            one()

    out = {"eager s/step": _timed(eager_round, device, args.reps) / args.steps}
    if device.type == "cuda":
        graph = _capture(one, device)

        def captured_round() -> None:
            for _ in range(args.steps):
                graph.replay()

        out["captured s/step"] = _timed(captured_round, device, args.reps) / args.steps
    return out


def eval_case(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    torch.manual_seed(0)
    g, n = args.eval_clients, args.eval_per_client
    model = build_model("fedavgcnn", num_classes=10, input_shape=(1, 28, 28)).to(device)
    states = {
        k: v.detach().unsqueeze(0).repeat(g, *([1] * v.dim()))
        for k, v in model.state_dict().items()
    }
    x = torch.rand(g, n, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (g, n), device=device)

    @torch.no_grad()
    def loop() -> None:
        for i in range(g):
            logits = functional_call(model, {k: v[i] for k, v in states.items()}, (x[i],))
            (logits.argmax(1) == y[i]).sum()

    @torch.no_grad()
    def one_pass() -> None:
        logits = vmap(lambda s, xi: functional_call(model, s, (xi,)))(states, x)
        (logits.argmax(-1) == y).sum(1)

    return {
        "client by client s": _timed(loop, device, args.reps),
        "one vmap s": _timed(one_pass, device, args.reps),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--clients", default="10,100", help="clients per step, comma-separated")
    p.add_argument("--steps", type=int, default=60, help="steps per timed round")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--per-client", type=int, default=600, help="training samples per client")
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--eval-clients", type=int, default=100)
    p.add_argument("--eval-per-client", type=int, default=175)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--deterministic", type=int, default=1, help="engine.deterministic's setting")
    args = p.parse_args()
    device = torch.device(args.device)
    configure_device(device, bool(args.deterministic))  # engine.deterministic's switches
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"# captured steps: {name}, torch {torch.__version__}, steps {args.steps}, "
        f"batch {args.batch}, deterministic {bool(args.deterministic)}\n"
    )
    print(
        "| case | G | eager ms/step | captured ms/step | captured / eager | samples/s captured "
        "(eager) | captured = eager |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for g in [int(v) for v in args.clients.split(",")]:
        for case, fn in (("batched step", clients_case), ("ceiling", ceiling_case)):
            r = fn(g, args, device)
            e, c = r["eager s/step"], r.get("captured s/step")
            samples = g * args.batch
            cap = f"{c * 1e3:.3f}" if c else "—"
            ratio = f"{c / e:.3f}" if c else "—"
            rate = f"{samples / c:,.0f} ({samples / e:,.0f})" if c else f"— ({samples / e:,.0f})"
            diff = r.get("captured max|diff| vs eager")
            same = "—" if diff is None else ("yes" if diff == 0 else f"max diff {diff:.2e}")
            print(
                f"| {case} | {g} | {e * 1e3:.3f} | {cap} | {ratio} | {rate} | {same} |", flush=True
            )
    ev = eval_case(args, device)
    print(
        f"\nevaluation of {args.eval_clients} personalised models x {args.eval_per_client} "
        f"samples: client by client {ev['client by client s'] * 1e3:.2f} ms, one vmap "
        f"{ev['one vmap s'] * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
