"""Methods built on a toy context — a small model and a few tensors, no dataset — and tested
for the behaviour that defines them (as FedJAX's ``fed_avg_test`` tests an algorithm): FedCMD's
personal-layer selection and similarity-tailored mixing, Dis-PFL's mask-holder averaging,
Pa3dFL's hyper-network giving clients their own tensors."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from fedpart.config import Config
from fedpart.engine.context import MethodContext
from fedpart.engine.mixing import mix_states, normalize_rows
from fedpart.engine.store import ClientStateStore
from fedpart.engine.training import ClientJob
from fedpart.models.cnn import FedAvgCNN, LeNet5
from fedpart.models.mlp import MLP
from fedpart.registry import methods


def build(name: str, model, clients: int, *, capacity=None, input_shape=(4,), **options):
    """A method on a toy context: a ``MethodContext`` of a small model, nothing loaded."""
    cfg = Config.from_dict(
        {"seed": 5, "algorithm": {"name": name, **options}, "federation": {"rounds": 4}}
    )
    cls = methods()[name]
    data = SimpleNamespace(
        num_clients=clients, bundle=SimpleNamespace(input_shape=tuple(input_shape))
    )
    ctx = MethodContext(cfg, data, torch.device("cpu"), capacity)
    algo = ctx.algorithm = cls(cls.parse_options(options), ctx)
    ctx.model = algo.wrap_model(model)
    ctx.store = ClientStateStore(
        ctx.model, ctx.model.state_dict(), algo.stored_blocks(), algo.personal_keys()
    )
    algo.setup()
    return algo, ctx


def toy_model() -> MLP:
    """Three blocks: fc1 | fc2 | classifier."""
    torch.manual_seed(0)
    return MLP(3, (4,), hidden=(5, 6))


def moved(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        k: v + torch.randn(v.shape, generator=g) if v.is_floating_point() else v
        for k, v in state.items()
    }


# ----------------------------------------------------------------------------------- FedCMD
def test_fedcmd_fixes_the_majority_layer_after_the_selection_rounds():
    algo, ctx = build("fedcmd", toy_model(), 4, selection_rounds=2)
    assert algo.candidates == ("fc2", "classifier") and algo.chain == ("fc1", "fc2", "classifier")
    assert algo.recipe(0, 0).observe.blocks == algo.chain  # every batch votes in selection
    start = ctx.store.client_state(0)
    votes = {0: [1, 1, 0], 1: [1], 2: [0, 1, 1], 3: [0]}  # batch votes: indices of candidates
    for rnd in range(2):
        for c, v in votes.items():
            algo.trained(rnd, c, SimpleNamespace(observations=[(i, False) for i in v]))
        uploads = {c: algo.upload(rnd, c, moved(start, c)) for c in votes}
        algo.aggregate(rnd, uploads, dict.fromkeys(votes, 1.0))
        assert algo.votes.winners[-1] == "classifier"  # clients 0, 1, 2 vote classifier
    assert algo.layer == "classifier"
    assert set(ctx.store.personal_keys) == {"classifier.weight", "classifier.bias"}


def lenet_like() -> LeNet5:
    """conv1 | conv2 | fc1 | fc2 | classifier: FedCMD's candidates are fc1, fc2, classifier."""
    torch.manual_seed(0)
    return LeNet5(3, (1, 28, 28))


def select(votes_by_round: list[dict[int, list[int]]], ties: dict, tied: bool = False):
    """FedCMD on the toy CNN fed these batch votes (indices into fc1, fc2, classifier; −1: no
    vote), each batch's minimum ``tied`` or not: the algorithm and each round's vote row."""
    shape = (1, 28, 28)
    rounds = len(votes_by_round)
    algo, ctx = build("fedcmd", lenet_like(), 6, input_shape=shape, selection_rounds=rounds, **ties)
    start, rows = ctx.store.client_state(0), []
    for rnd, votes in enumerate(votes_by_round):
        for c, v in votes.items():
            algo.trained(rnd, c, SimpleNamespace(observations=[(i, tied) for i in v]))
        uploads = {c: algo.upload(rnd, c, start) for c in votes}
        algo.aggregate(rnd, uploads, dict.fromkeys(votes, 1.0))
        rows.append(algo.round_metrics())
    return algo, rows


def test_fedcmd_tie_rules_decide_the_client_the_round_and_the_final_vote():
    first = {"client_tie": "first", "round_tie": "first", "final_tie": "first"}
    algo, _ = select([{0: [0]}], {})
    assert algo.candidates == ("fc1", "fc2", "classifier")
    # a client 1-1 between fc2 (its first batch) and fc1
    client = [{0: [1, 0]}]
    assert select(client, first)[0].layer == "fc1"  # first: the earliest candidate
    assert select(client, {})[0].layer == "fc2"  # the default: first_seen (the authors' code)
    assert select(client, {"client_tie": "first_seen"})[0].layer == "fc2"
    assert select(client, {"client_tie": "prefer_fc2"})[0].layer == "fc2"
    # a round 2-2: clients 0 and 3 vote fc1, clients 1 and 2 fc2
    round_ = [{0: [0], 1: [1], 2: [1], 3: [0]}]
    assert select(round_, first)[0].layer == "fc1"
    assert select(round_, {"round_tie": "prefer_fc2"})[0].layer == "fc2"
    # 2-2 between fc2 and classifier, client 0 (the first participant) voting classifier
    round_ = [{0: [2], 1: [1], 2: [1], 3: [2]}]
    algo, rows = select(round_, first, tied=True)
    assert algo.layer == "fc2"
    assert select(round_, {"round_tie": "first_seen"})[0].layer == "classifier"
    assert select(round_, {})[0].layer == "classifier"
    assert rows[0]["fedcmd_votes"] == {"classifier": 2, "fc2": 2}
    assert rows[0]["fedcmd_batch_votes"] == {"fc1": 0, "fc2": 2, "classifier": 2}
    assert rows[0]["fedcmd_ties"] == {
        "batch": 4,
        "client": 0,
        "round": ["fc2", "classifier"],
        "no_vote_batches": 0,
    }
    # the rounds 1-1: fc2 won round 0, fc1 round 1
    final = [{0: [1]}, {0: [0]}]
    algo, _ = select(final, first)
    assert algo.layer == "fc1" and algo.summary_values()["final_tie"] == ["fc1", "fc2"]
    assert select(final, {"final_tie": "first_seen"})[0].layer == "fc2"
    assert select(final, {"final_tie": "prefer_fc2"})[0].layer == "fc2"
    # a batch that casts no vote is counted; a client with no vote at all abstains
    _, rows = select([{0: [-1, 2], 1: [-1]}], first)
    assert rows[0]["fedcmd_votes"] == {"classifier": 1}
    assert rows[0]["fedcmd_ties"]["no_vote_batches"] == 1


def test_fedcmd_mixes_the_layers_after_l_star_by_personal_layer_similarity():
    algo, ctx = build("fedcmd", toy_model(), 4, personal_layer="fc1")
    assert algo.layer == "fc1" and algo.post_blocks() == ["fc2", "classifier"]
    start = ctx.store.client_state(0)
    participants = [0, 2, 3]
    states = {c: moved(start, 10 + c) for c in participants}
    jobs = {c: ClientJob(0, c, start, None) for c in participants}
    for c in participants:  # the engine keeps a trained client's personal tensors (l*)
        ctx.store.set_personal(c, states[c])
    uploads = {c: algo.upload(0, c, states[c], jobs[c]) for c in participants}
    assert "similarity/fc1.weight" in uploads[0]  # φ goes up for the similarity only
    algo.aggregate(0, uploads, dict.fromkeys(participants, 1.0))
    phi = algo.mixer.matrix
    fc1 = ["fc1.bias", "fc1.weight"]  # Eq. 8 over φ flattened in key order
    flat = {c: torch.cat([states[c][k].flatten() for k in fc1]).double() for c in participants}
    for i in participants:
        for j in participants:
            if i != j:
                cos = float(flat[i] @ flat[j] / (flat[i].norm() * flat[j].norm() + 1e-8))
                assert float(phi[i, j]) == max(0.0, cos)
    post = [k for k in ctx.store.keys if not k.startswith("fc1.")]
    for i in participants:
        held = [j for j in participants if phi[i, j] > 0]
        w = normalize_rows(phi[i, held][None], "linear")
        expect = mix_states([states[j] for j in held], w, post)[0]
        got = ctx.store.client_state(i)
        assert all(torch.equal(got[k], expect[k]) for k in post)
        assert all(torch.equal(got[k], states[i][k]) for k in fc1)  # l* stays on the client


# ---------------------------------------------------------------------------------- Dis-PFL
def test_dispfl_averages_each_coordinate_over_the_clients_holding_it():
    algo, ctx = build("dispfl", toy_model(), 3, dense_ratio=0.5)
    assert algo.prunable == ["fc1.weight", "fc2.weight", "classifier.weight"]
    key = "fc1.weight"
    shape = ctx.store.global_state[key].shape
    g = torch.Generator().manual_seed(1)
    algo.support = [{k: torch.rand(m[k].shape, generator=g) > 0.5 for k in m} for m in algo.masks]
    states = [
        {k: torch.randn(v.shape, generator=g) for k, v in ctx.store.client_state(c).items()}
        for c in range(3)
    ]
    for c in range(3):  # a client's model is zero outside the support it trained under
        for k, m in algo.support[c].items():
            states[c][k] = states[c][k] * m
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    out = algo.aggregate_sparse(0, [0, 1, 2], weights, states)
    held = torch.stack([algo.support[j][key] for j in range(3)]).float()
    a = weights.float().reshape(3, 1, 1)
    num = (a * held * torch.stack([s[key] for s in states])).sum(0)
    den = (a * held).sum(0)
    nobody = den == 0
    expect = torch.where(nobody, torch.zeros(shape), num / torch.where(nobody, 1.0, den))
    assert torch.allclose(out[key], expect * algo.masks[0][key], rtol=1e-6, atol=1e-7)
    assert bool((out[key][~algo.masks[0][key]] == 0).all())  # only its own mask's coordinates
    bias = "fc1.bias"  # dense: the weighted average of every sender
    dense = sum(float(weights[j]) * states[j][bias] for j in range(3))
    assert torch.allclose(out[bias], dense, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------- Pa3dFL
def test_pa3dfl_hypernetwork_gives_each_client_its_own_tensors_at_its_width():
    torch.manual_seed(0)
    model = FedAvgCNN(10, (1, 28, 28), padding=2, width=4)
    widths = SimpleNamespace(width=[1.0, 1.0, 0.5], capacity=[1.0, 1.0, 0.5])
    algo, ctx = build("pa3dfl", model, 3, capacity=widths, input_shape=(1, 28, 28))
    assert algo.hn is not None
    received = [algo.received(c) for c in range(3)]
    personal = [k for k in received[0] if k.startswith("personal.")]
    assert personal
    for k in personal:
        assert not torch.equal(received[0][k], received[1][k])  # same width, other tensors
        assert received[2][k].numel() <= received[0][k].numel()  # the narrow client's slice
    before = {k: received[0][k].clone() for k in personal}
    trained = {c: moved(algo.start_state(0, c), 20 + c) for c in (0, 1)}
    uploads = {c: algo.upload(0, c, trained[c]) for c in (0, 1)}
    algo.aggregate(0, uploads, {0: 1.0, 1: 1.0})
    after = algo.received(0)
    assert any(not torch.equal(after[k], before[k]) for k in personal)  # the step moved them
