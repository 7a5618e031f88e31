"""DQN with an action mask (the observation's last n_actions entries): only legal actions are
taken, greedy or random; the target's next action is the best legal one, in the autograd and
the fused step alike (against a reference written by hand); and a seat's replay transition
spans its move to its next (replay/seats.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asyncrl.algos.dqn.config import DQNConfig
from asyncrl.algos.dqn.networks import QNetwork
from asyncrl.algos.dqn.update import DQN
from asyncrl.envs import EnvSpec
from asyncrl.replay.seats import SeatTransitions

N = 5  # actions
F = 3  # features before the mask
SPEC = EnvSpec("masked", (F + N,), True, (), N, action_mask=True)


def _obs(rng: np.random.Generator, batch: int, waiting: float = 0.0) -> torch.Tensor:
    mask = rng.random((batch, N)) < 0.4
    mask[np.arange(batch), rng.integers(N, size=batch)] = True  # at least one legal move
    mask[rng.random(batch) < waiting] = False  # a seat that waits: no legal move
    return torch.from_numpy(np.concatenate([rng.normal(size=(batch, F)), mask], 1).astype("f4"))


def _q(seed: int = 0) -> QNetwork:
    torch.manual_seed(seed)
    return QNetwork(SPEC, [16], "mlp")


def test_the_layers_read_the_observation_without_its_mask():
    q = _q()
    assert q.n_mask == N and q.head[0].in_features == F
    obs = _obs(np.random.default_rng(0), 8)
    changed = obs.clone()
    changed[:, F:] = 1 - changed[:, F:]  # another mask, the same features
    assert torch.equal(q(obs), q(changed))


def test_greedy_and_random_actions_are_legal_and_random_ones_uniform_among_them():
    q, rng = _q(), np.random.default_rng(1)
    obs = _obs(rng, 20_000)
    legal = obs[:, F:] > 0
    rows = torch.arange(len(obs))
    greedy, _ = q.act(obs, deterministic=True)
    assert legal[rows, greedy].all()
    # the greedy action is the best legal one, even where an illegal one is valued higher
    values = q(obs).masked_fill(~legal, float("-inf"))
    assert torch.equal(greedy, values.argmax(-1))
    assert (q(obs).argmax(-1) != greedy).any()
    q.epsilon.fill_(1.0)  # every action random
    drawn, _ = q.act(obs, generator=torch.Generator().manual_seed(2))
    assert legal[rows, drawn].all()
    # uniform: among rows with the same legal set, each legal action about equally often
    two = legal[:, 0] & legal[:, 3] & (legal.sum(1) == 2)
    share = (drawn[two] == 0).float().mean().item()
    assert two.sum() > 200 and abs(share - 0.5) < 0.1
    # a row with no legal action (a seat that waits) may take any: nothing is excluded
    none = _obs(rng, 500, waiting=1.0)
    drawn, _ = q.act(none, generator=torch.Generator().manual_seed(3))
    assert set(drawn.tolist()) == set(range(N))


def _batch(g: torch.Generator, rng: np.random.Generator, n: int = 6) -> dict[str, torch.Tensor]:
    obs = _obs(rng, n)
    legal = obs[:, F:] > 0
    action = torch.multinomial(legal.float(), 1, generator=g).squeeze(1)  # legal, as taken
    return {
        "obs": obs,
        "action": action,
        "reward": torch.randn(n, generator=g),
        "next_obs": _obs(rng, n, waiting=0.3),
        "discount": 0.9 * (torch.rand(n, generator=g) > 0.2).float(),
    }


def _reference_target(q, q_target, b, double: bool) -> torch.Tensor:
    """Row by row: the best legal next action (all actions where none is legal), valued by
    the target network, discounted."""
    out = []
    with torch.no_grad():
        online, target = q(b["next_obs"]), q_target(b["next_obs"])
    for i in range(len(b["reward"])):
        legal = [a for a in range(N) if b["next_obs"][i, F + a] > 0] or list(range(N))
        if double:
            pick = max(legal, key=lambda a: online[i, a].item())
            value = target[i, pick].item()
        else:
            value = max(target[i, a].item() for a in legal)
        out.append(b["reward"][i].item() + b["discount"][i].item() * value)
    return torch.tensor(out)


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("fused", [False, True])
def test_the_target_takes_the_best_legal_next_action_as_a_reference_by_hand(double, fused):
    q = _q(4)
    cfg = DQNConfig(lr=1e-2, double=double, td_loss="mse", max_grad_norm=0.0)
    rule = DQN(q, cfg, target_updates_every=1000, fused=fused)
    assert (rule.fused is not None) == fused
    g, rng = torch.Generator().manual_seed(5), np.random.default_rng(5)
    rule.update(_batch(g, rng))  # the online network moves away from the target one
    b = _batch(g, rng, 12)
    # an illegal next action valued above every legal one, where a row has a mask
    with torch.no_grad():
        rule.q_target.head[-1].bias[2] += 100.0
        q.head[-1].bias[2] += 100.0
    nxt = b["next_obs"][:, F:] > 0
    shut = ~nxt[:, 2] & nxt.any(1)  # rows where action 2 is illegal, another legal
    assert shut.any()
    target = _reference_target(q, rule.q_target, b, double)
    taken = q(b["obs"]).gather(1, b["action"][:, None]).squeeze(1).detach()
    want = ((taken - target) ** 2).mean()
    stats = rule.update(b)
    assert stats[0].item() == pytest.approx(want.item(), rel=1e-5)
    assert target[shut].abs().max() < 50  # the illegal action's value entered no target


def _slot(actor, obs, actions, own, rewards, terminated, final_obs=None, generation=0):
    """A one-step slot of K seats (T = 1), as an actor writes it."""
    K = len(own)
    return SimpleNamespace(
        actor=np.array([actor]),
        generation=np.array([generation]),
        obs=np.asarray(obs, np.float32).reshape(2, K, 1),  # rows t and t + 1
        actions=np.asarray(actions, np.int64).reshape(1, K),
        own=np.asarray(own, bool).reshape(1, K),
        rewards=np.asarray(rewards, np.float32).reshape(1, K),
        terminated=np.asarray(terminated, bool).reshape(1, K),
        truncated=np.zeros((1, K), bool),
        final_obs=np.zeros((1, K, 1), np.float32) if final_obs is None else final_obs,
    )


def test_a_seats_transition_spans_its_move_to_its_next_across_slots():
    """Two seats of one game take turns in one-step slots: seat 0 moves at observations 10
    and 12, seat 1 at 11 and 13, and wins with that move. Seat 0's loss comes at seat 1's
    move and ends its transition, terminated, at its final observation."""
    seats = SeatTransitions()
    out = [
        seats.add(_slot(0, [[10, 0], [0, 11]], [1, 0], [1, 0], [0, 0], [0, 0])),
        seats.add(_slot(0, [[0, 11], [12, 0]], [0, 2], [0, 1], [0, 0], [0, 0])),
        seats.add(_slot(0, [[12, 0], [0, 13]], [3, 0], [1, 0], [0, 0], [0, 0])),
    ]
    assert [len(o["reward"]) for o in out] == [0, 0, 1]
    # seat 0's move at 10 ended when it moved again, at 12
    assert out[2]["obs"][:, 0].tolist() == [10] and out[2]["next_obs"][:, 0].tolist() == [12]
    assert out[2]["action"].tolist() == [1] and not out[2]["terminated"].any()
    final = np.array([[[90.0], [91.0]]], np.float32)
    last = seats.add(_slot(0, [[0, 13], [0, 0]], [0, 4], [0, 1], [-1, 1], [1, 1], final))
    # seat 1's move at 11 ends as it moves at 13; then the game's end ends seat 0's move at
    # 12 (the -1 seat 1's winning move brought it) and seat 1's at 13 (+1), at their final
    # observations, terminated
    assert last["obs"][:, 0].tolist() == [11, 12, 13]
    assert last["action"].tolist() == [2, 3, 4]
    assert last["reward"].tolist() == [0.0, -1.0, 1.0]
    assert last["next_obs"][:, 0].tolist() == [13, 90, 91]
    assert last["terminated"].tolist() == [False, True, True]
    assert not last["truncated"].any()
    # nothing stays open: the next game's first move opens a new transition
    assert not seats.open[0]["open"].any()
    # another actor's seats are streams of their own
    assert len(seats.add(_slot(1, [[0, 7], [8, 0]], [0, 1], [0, 1], [0, 0], [0, 0]))["reward"]) == 0
    assert seats.open[1]["open"].tolist() == [False, True] and not seats.open[0]["open"].any()


def test_an_actor_whose_rollout_was_dropped_starts_its_seats_transitions_anew():
    seats = SeatTransitions()
    seats.add(_slot(0, [[10, 0], [0, 11]], [1, 0], [1, 0], [0, 0], [0, 0]))
    seats.add(_slot(1, [[20, 0], [22, 21]], [1, 0], [1, 0], [0, 0], [0, 0]))
    seats.forget(0)  # a rollout of actor 0 held a NaN: what its seats received is not known
    out = seats.add(_slot(0, [[12, 0], [0, 13]], [3, 0], [1, 0], [0, 0], [0, 0]))
    assert len(out["reward"]) == 0  # no transition from 10 across the missing rollout
    assert len(seats.add(_slot(1, [[22, 21], [0, 0]], [3, 0], [1, 0], [0, 0], [0, 0]))["obs"]) == 1
    assert seats.broken == 0  # forgotten, not broken


def test_a_replaced_actors_first_slot_drops_the_open_transitions_its_predecessor_left():
    """Actor 0 is killed after its seat 0 moved at 10, and replaced (generation 1, new envs):
    seat 0's move at 10 joins no transition with a move of the replacement's games; actor 1,
    going on, is untouched."""
    seats = SeatTransitions()
    seats.add(_slot(0, [[10, 0], [0, 11]], [1, 0], [1, 0], [0, 0], [0, 0]))
    seats.add(_slot(1, [[20, 0], [22, 21]], [1, 0], [1, 0], [0, 0], [0, 0]))

    def replaced(*args):
        return _slot(0, *args, generation=1)

    out = seats.add(replaced([[5, 0], [0, 6]], [3, 0], [1, 0], [0, 0], [0, 0]))
    assert len(out["reward"]) == 0 and seats.broken == 1
    assert seats.open[0]["open"].tolist() == [True, False]  # its move at 5 opens anew
    seats.add(replaced([[0, 6], [7, 0]], [0, 2], [0, 1], [0, 0], [0, 0]))
    out = seats.add(replaced([[7, 0], [0, 8]], [4, 0], [1, 0], [0, 0], [0, 0]))
    assert out["obs"][:, 0].tolist() == [5] and out["next_obs"][:, 0].tolist() == [7]
    assert len(seats.add(_slot(1, [[22, 21], [0, 0]], [3, 0], [1, 0], [0, 0], [0, 0]))["obs"]) == 1
    assert seats.broken == 1


def test_the_learner_forgets_the_open_transitions_of_an_actor_whose_rollout_it_dropped():
    pytest.importorskip("pettingzoo")
    from asyncrl.runtime.trainer import prepare
    from asyncrl.settings import TrainConfig

    env = "pettingzoo:pettingzoo.classic.connect_four_v3"
    run = prepare(TrainConfig(env=env, algo="dqn", on_nonfinite="skip", progress=False))
    learner = run.algo.learner(run.cfg, run.spec)
    try:
        K, dim = run.cfg.envs_per_actor, run.spec.obs_shape[0]

        def slot(actor: int, reward: float) -> SimpleNamespace:
            own = np.arange(K) % 2 == 0  # the first seat of every game moves
            return SimpleNamespace(
                actor=np.array([actor]),
                generation=np.array([0]),
                obs=np.zeros((2, K, dim), np.float32),
                actions=np.zeros((1, K), np.int64),
                own=own[None],
                rewards=np.full((1, K), reward, np.float32),
                terminated=np.zeros((1, K), bool),
                truncated=np.zeros((1, K), bool),
                final_obs=np.zeros((1, K, dim), np.float32),
            )

        learner.seats.add(slot(0, 0.0))
        learner.seats.add(slot(1, 0.0))
        assert set(learner.seats.open) == {0, 1}
        fields, at_ends = learner.CHECKED, learner.CHECKED_AT_ENDS
        # a waiting seat's reward is read too: a NaN there drops the rollout
        bad = slot(0, 0.0)
        bad.rewards[0, 1] = np.nan
        good = slot(1, 0.0)
        assert learner.finite_rollouts([bad, good], fields, at_ends) == [good]
        assert learner.skipped_rollouts == 1 and set(learner.seats.open) == {1}
    finally:
        learner.close()
