"""fedpart's local training against a plain PyTorch loop of the same steps, in one process.

pfl-research's protocol (``benchmarks/pfl_side_by_side.py``) at one thread: each repeat trains
``--clients`` users of 50 CIFAR-shaped images (generated), 1 epoch of batch 10, lr 0.1, from the
same start, once through fedpart's sequential trainer (:func:`fedpart.engine.training.
train_client`: ``functional_call``, ``autograd.grad``, its SGD update, dropout from each
client's stream, uint8 images normalised per batch, channels-last convolutions) and once as the
plain loop pfl-research runs (``nn.Sequential`` behind its NHWC-to-NCHW transpose, float32
images normalised up front, ``nn.Dropout``, ``torch.optim.SGD``, ``zero_grad``), alternating.
The whole runs of the two tools also differ in what surrounds training (sampling, aggregation,
evaluation, processes); this isolates the training steps, which are most of an iteration.
``--pfl`` adds pfl-research's own local training (``PyTorchSGDBridge.do_sgd`` on its
``PyTorchModel`` and ``Dataset``), the contestants rotating which goes first.

    python benchmarks/one_thread_step.py --clients 50 --repeats 5
    python benchmarks/one_thread_step.py --clients 50 --repeats 9 --pfl
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pfl_side_by_side as side  # noqa: E402

from fedpart.engine.data import ClientData, FederatedData  # noqa: E402
from fedpart.engine.recipe import Recipe  # noqa: E402
from fedpart.engine.training import TrainSettings, train_client  # noqa: E402

PER_USER = 50
BATCH = 10


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50, help="users trained per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (after one)")
    parser.add_argument(
        "--layout",
        choices=("channels_last", "contiguous"),
        default="channels_last",
        help="fedpart's convolution layout (engine.conv_layout)",
    )
    parser.add_argument(
        "--pfl", action="store_true", help="also time pfl-research's own local training"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    n = args.clients
    x, y, xt, yt = side.workload_data(n, PER_USER, 10, 0, None)
    bundle = side.fedpart_bundle((x, y, xt, yt))
    empty = torch.tensor([], dtype=torch.long)
    clients = [
        ClientData(torch.arange(u * PER_USER, (u + 1) * PER_USER), empty, empty) for u in range(n)
    ]
    data = FederatedData(bundle, bundle.train_x, bundle.train_y, clients, None, "none")
    model = side.SimpleCNN(10, (3, 32, 32))
    model.set_channels_last(args.layout == "channels_last")
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    settings = TrainSettings(
        lr=0.1,
        momentum=0.0,
        weight_decay=0.0,
        batch_size=BATCH,
        local_epochs=1,
        drop_last=False,
        seed=0,
    )

    def fedpart_clients() -> None:
        for c in range(n):
            train_client(model, start, Recipe(), data, c, 0, settings)

    net = side.pfl_simple_cnn(10, 32, 3)
    images, labels = side.pfl_images(x), torch.from_numpy(y)
    init = {k: v.clone() for k, v in net.state_dict().items()}

    def plain_clients() -> None:
        for c in range(n):
            net.load_state_dict(init)
            opt = torch.optim.SGD(net.parameters(), 0.1)
            xs = images[c * PER_USER : (c + 1) * PER_USER]
            ys = labels[c * PER_USER : (c + 1) * PER_USER]
            for b in range(0, PER_USER, BATCH):  # in order, as pfl-research iterates a user
                loss = net.loss(xs[b : b + BATCH], ys[b : b + BATCH])
                opt.zero_grad()
                loss.backward()
                opt.step()

    times: dict[str, list[float]] = {"fedpart": [], "plain loop": []}
    runs: tuple = (("fedpart", fedpart_clients), ("plain loop", plain_clients))
    if args.pfl:
        times["pfl-research"] = []
        runs = (*runs, ("pfl-research", pfl_trainer(images, labels, n)))
    for r in range(args.repeats + 1):
        for name, fn in runs[r % len(runs) :] + runs[: r % len(runs)]:
            t = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - t)
    print(
        f"torch {torch.__version__}, 1 thread, {n} users x {PER_USER // BATCH} steps of {BATCH} "
        f"images, fedpart {args.layout}; seconds per repeat after one"
    )
    for name, ts in times.items():
        print(
            f"{name:>10}: median {statistics.median(ts):.3f} s  ({', '.join(f'{t:.3f}' for t in ts)})"
        )
    for name in times:
        if name != "fedpart":
            ratio = statistics.median(times[name]) / statistics.median(times["fedpart"])
            print(f"{name} / fedpart = {ratio:.2f}x (above 1: fedpart faster)")


def pfl_trainer(images: torch.Tensor, labels: torch.Tensor, n: int):
    """pfl-research's own local training (``PyTorchSGDBridge.do_sgd`` on its ``PyTorchModel``
    and ``Dataset``), each user from the same start, as its FedAvg trains a user."""
    from pfl.data.dataset import Dataset
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.internal.bridge.pytorch.sgd import PyTorchSGDBridge
    from pfl.model.pytorch import PyTorchModel

    net = side.pfl_simple_cnn(10, 32, 3)
    model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), 1.0),
    )
    init = model.get_parameters()
    users = [
        Dataset(
            raw_data=[
                images[u * PER_USER : (u + 1) * PER_USER],
                labels[u * PER_USER : (u + 1) * PER_USER],
            ]
        )
        for u in range(n)
    ]
    params = NNTrainHyperParams(local_learning_rate=0.1, local_num_epochs=1, local_batch_size=BATCH)

    def run() -> None:
        for user in users:
            model.set_parameters(init)
            PyTorchSGDBridge.do_sgd(model, user, params)
            model.get_model_difference(init)

    return run


if __name__ == "__main__":
    main()
