"""What separates Pa3dFL's decomposition (Eq. 4) from FLANC's (Eq. 3): a trained run's client
models moved to the other decomposition, and what that costs them.

    python benchmarks/pa3dfl/decompositions.py benchmarks/pa3dfl/runs/pa3dfl-e5g-hetero-seed0
    python benchmarks/pa3dfl/decompositions.py \\
        benchmarks/pa3dfl/runs/pa3dfl-flanceq5-e5g-hetero-seed0 --against RECORD

Both decompositions write a layer's weight as ``θ' = θ_u θ_v`` with ``θ_u ∈ R^{k²R1×R2}``
general (one for every client); they differ in the layout — which entries of the weight make a
column of ``θ'`` (a kernel of ``R1`` consecutive output channels in Eq. 4, of one output channel
over ``R1`` consecutive inputs in Eq. 3) — and in ``R1``, ``R2``. Where ``R2 < k²R1`` every
client's columns lie in the one ``R2``-dimensional space of ``θ_u``: that is all a layout can
restrict. Reads the run's last checkpoint (nothing is written) and, for every client's received
model ``M_0`` and test model:

- composes each layer's weight and writes it in the other decomposition's layout (Eq. 5 ranks for
  Pa3dFL, ``algorithm.flanc_ranks=eq5`` for FLANC);
- projects every client's columns onto their best common ``R2``-dimensional basis (SVD of all
  clients' columns together) and builds the other decomposition's model from it (``θ_u`` = the
  basis, ``θ_v`` = the coefficients; a layer the other layout does not restrict moves exactly);
- evaluates it on the client's test split.

It prints, per layer, each layout's ``k²R1`` and ``R2`` and the relative error of the projection
(over all clients), and the per-capacity-group accuracy of the run's models and of the moved ones
(the column ``… as <own>`` moves them to their own layout: it checks the conversion and equals
the run's column). With ``--against RECORD`` (the same seed's record) it compares the test model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import Tensor

from fedpart.models.factorization import Factorization
from fedpart.models.factorized import FactorizedCNN

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_tables import accuracy_on, report_with_notes, restored_run, run_parser  # noqa: E402

LAYOUTS = ("pa3dfl", "flanc")


def to_columns(geo: Factorization, weight: Tensor) -> Tensor:
    """``θ'`` of ``weight`` in ``geo``'s layout: the inverse of ``geo.compose``'s reshape, so
    that ``geo.compose(I, to_columns(geo, w)) == w``."""
    r1, k, s, t = geo.r1, geo.kernel_size, geo.in_channels, geo.out_channels
    kk = (k, k) if geo.conv else ()
    nk = len(kk)
    if geo.kind == "pa3dfl":
        nb = t // r1
        # W[j·R1 + i, s, κ] = θ'[(i, κ), (j, s)]
        w = weight.reshape(nb, r1, s, *kk).permute(1, *range(3, 3 + nk), 0, 2)
        return w.reshape(r1 * geo.k2, nb * s)
    g = s // r1
    # W[o, g·R1 + i, κ] = θ'[(i, κ), (o, g)]
    w = weight.reshape(t, g, r1, *kk).permute(2, *range(3, 3 + nk), 0, 1)
    return w.reshape(r1 * geo.k2, t * g)


def model_in(model: FactorizedCNN, decomposition: str) -> FactorizedCNN:
    """A model of the same CNN, width and heads in ``decomposition`` (FLANC: Eq. 5 ranks)."""
    return FactorizedCNN(
        model.num_classes,
        model.input_shape,
        variant=model.variant,
        decomposition=decomposition,
        p_min=model.p_min,
        width=model.width,
        local_head="local_head" in model.head_names,
        spec=model.spec,
        ranks="eq5",
    )


def move(
    models: list[FactorizedCNN], states: list[dict[str, Tensor]], decomposition: str
) -> tuple[list[FactorizedCNN], list[dict[str, Tensor]], dict[str, float]]:
    """Every client's model (``models[c]`` with ``states[c]``) moved to ``decomposition``: per
    layer, the clients' composed weights in its layout, projected onto the best common basis of
    ``R2`` columns. Returns the new models, their states and each layer's relative error
    (Frobenius norm of the projection's residual over all clients, over the weights')."""
    by_width: dict[float, FactorizedCNN] = {}  # one model per width: the states differ, not it
    for m in models:
        if m.width not in by_width:
            by_width[m.width] = model_in(m, decomposition)
    targets = [by_width[m.width] for m in models]
    new_states = [{k: v for k, v in s.items() if not k.endswith(("_u", "_v"))} for s in states]
    errors: dict[str, float] = {}
    for name in models[0].composed_weights():
        cols = []
        for m, s, t in zip(models, states, targets, strict=True):
            w = m.layer_geometry(name).compose(s[f"general.{name}_u"], s[f"personal.{name}_v"])
            cols.append(to_columns(t.layer_geometry(name), w.double()))
        geo = targets[0].layer_geometry(name)
        rows, r2 = geo.u_shape
        basis = torch.linalg.svd(torch.cat(cols, dim=1), full_matrices=False)[0][:, :r2]
        if basis.shape[1] < r2:  # fewer columns than R2 in all: pad the basis with zeros
            basis = torch.cat([basis, basis.new_zeros(rows, r2 - basis.shape[1])], dim=1)
        residual = total = 0.0
        for c, col in enumerate(cols):
            coeff = basis.t() @ col
            residual += float((col - basis @ coeff).pow(2).sum())
            total += float(col.pow(2).sum())
            new_states[c][f"general.{name}_u"] = basis.float()
            new_states[c][f"personal.{name}_v"] = coeff.float()
        errors[name] = (residual / total) ** 0.5 if total else 0.0
    return targets, new_states, errors


def client_accuracies(run: Path) -> tuple[list[dict], int, list[str]]:
    """Per client: width, group and the accuracy (%) of its received and test models, in the
    run's decomposition and moved to each layout; the rounds completed; the layer table."""
    cfg, sim = restored_run(run, "pa3dfl")
    algo, data = sim.algorithm, sim.algorithm.ctx.data
    n = data.num_clients

    def accuracy(model: FactorizedCNN, state: dict[str, Tensor], c: int) -> float:
        return accuracy_on(model, state, data, data.clients[c].test, cfg.engine.eval_batch_size)

    models = [algo.model_for(c) for c in range(n)]
    own = models[0].decomposition
    other = next(d for d in LAYOUTS if d != own)
    rows = [
        {
            "client": c,
            "width": float(algo.ctx.capacity.width[c]),
            "group": int(algo.ctx.capacity.groups[c]),
        }
        for c in range(n)
    ]
    layers = ["| model | layer | layout | k²R1 | R2 | relative error |", "|" + " --- |" * 6]
    for which, states in (
        ("received", [algo.received(c) for c in range(n)]),
        ("test", [algo.eval_state(c) for c in range(n)]),
    ):
        for c in range(n):
            rows[c][which] = accuracy(models[c], states[c], c)
        for layout in (own, other):
            targets, moved, errors = move(models, states, layout)
            for c in range(n):
                rows[c][f"{which} as {layout}"] = accuracy(targets[c], moved[c], c)
            for name, err in errors.items():
                rows_, r2 = targets[0].layer_geometry(name).u_shape
                layers.append(f"| {which} | {name} | {layout} | {rows_} | {r2} | {err:.2e} |")
    return rows, sim.rounds_completed, layers


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__, "Pa3dFL (either decomposition)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    columns = [
        f"{model}{layout}"
        for model in ("received", "test")
        for layout in ("", " as pa3dfl", " as flanc")
    ]
    return report_with_notes(
        args,
        lambda: client_accuracies(args.run),
        columns,
        "Per layer, each layout (θ_u has the same shape at every width):",
    )


if __name__ == "__main__":
    sys.exit(main())
