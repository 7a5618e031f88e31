"""PBT moves an algorithm's mutable settings (its ``mutable``) through the learner's
``set_hyperparameters``: a compiled step must take every new value without compiling again (a
compile takes tens of seconds, and past torch's limit of recompilations the step raises), and
must train with it as the eager step does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from asyncrl.algos import algorithm, algorithms
from asyncrl.envs import check_env, env_family
from asyncrl.learning.population import perturb_value
from asyncrl.runtime.transport import SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, for_env, resolve

T, K = 16, 2
# each compiled path of each algorithm with a compile setting: TrainConfig's fields and the env
COMPILED = {
    "ppo, mlp step": ("ppo", "CartPole-v1", {}),
    "ppo, mlp step, continuous": ("ppo", "Pendulum-v1", {}),
    "ppo, sequence step": ("ppo", "CartPole-v1", {"recurrent": "gru", "recurrence": 4}),
    "ppo, autograd step (cnn)": ("ppo", "fake_envs:DotSide-v0", {"encoder": "cnn"}),
}
CASES = [
    (path, name) for path, (algo, _, _) in COMPILED.items() for name in algorithm(algo).mutable
]


def _learner(path: str, compile: bool):
    algo, env, kw = COMPILED[path]
    given = TrainConfig(
        algo=algo,
        env=env,
        actors=1,
        envs_per_actor=K,
        rollout=T,
        minibatch_size=16,
        epochs=2,
        hidden=[8],
        rnn_size=8,
        lr=3e-3,
        ent_coef=0.01,
        correction="none",  # the clip around the stored log-probs: clip_coef acts at once
        compile=compile,
        **kw,
    )
    cfg = resolve(given, env_family(env))
    spec = check_env(env)
    cfg, _ = for_env(cfg, spec, given)
    assert cfg.compile == compile
    return algorithm(algo).learner(cfg, spec), cfg, spec


def _slot(cfg, spec, store: SlotStore):
    """A slot of made-up samples; the stored log-probs are random, so that ratios clip."""
    rng = np.random.default_rng(0)
    s = store.slots[0]
    for name, shape, dtype in rollout_layout(cfg, spec, algorithm(cfg.algo)).fields:
        a = getattr(s, name)
        if np.dtype(dtype) == np.uint8:
            a[:] = rng.integers(0, 256, shape)
        elif np.dtype(dtype).kind == "f":
            a[:] = rng.standard_normal(shape)
        else:
            a[:] = 0
    if spec.discrete:
        s.actions[:] = rng.integers(0, spec.n_actions, s.actions.shape)
    s.logp[:] = np.log(rng.uniform(0.05, 1.0, s.logp.shape))
    s.terminated[:] = rng.random(s.terminated.shape) < 0.05
    s.ep_returns[:] = np.nan
    s.env_steps[0] = T * K
    return s


class _Graphs:
    """A torch.compile backend that counts the graphs dynamo hands it and runs them as they
    are: dynamo's guards, which decide recompilations, are those of any backend."""

    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        self.count += 1
        return gm.forward


@pytest.fixture
def graphs(monkeypatch) -> _Graphs:
    """torch.compile as asyncrl calls it, with the counting backend instead of inductor (no
    C++ compile: a few seconds)."""
    real, backend = torch.compile, _Graphs()

    def compile(fn, fullgraph=False, dynamic=None, options=None, **_):
        return real(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend)

    monkeypatch.setattr(torch, "compile", compile)
    return backend


def _params(learner) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in learner.policy.parameters()])


def _moves(algo: str, cfg, names) -> list[dict]:
    """For each of ``names`` in turn: two new values as PBT draws them anew (--pbt-resample
    1), then its bounds."""
    rng, moves = np.random.default_rng(1), []
    for name in names:
        bounds = algorithm(algo).mutable[name]
        drawn = [perturb_value(getattr(cfg, name), bounds, rng, 1.0) for _ in range(2)]
        assert getattr(cfg, name) not in drawn
        moves += [{name: v} for v in [*drawn, bounds[0], bounds[1]]]
    return moves


def _assert_moves_recompile_nothing_and_act(path: str, names, graphs: _Graphs | None) -> None:
    """A compiled learner trains, then PBT moves each of ``names`` (set_hyperparameters) with
    an update after each move: no graph is compiled again, and the learner ends where an eager
    one that took the same moves does, not where one that never moved does (by more than the
    rounding the two steps differ by)."""
    algo = COMPILED[path][0]
    learner, cfg, spec = _learner(path, compile=True)
    eager, _, _ = _learner(path, compile=False)
    unmoved, _, _ = _learner(path, compile=False)
    moves = _moves(algo, cfg, names)
    store = SlotStore(rollout_layout(cfg, spec, algorithm(cfg.algo)), 1, shared=False)
    try:
        slot = _slot(cfg, spec, store)
        for ppo in (learner, eager, unmoved):  # compiled here: every graph, and what a first
            ppo.train([slot])  # step changes (Adam's state)
            ppo.train([slot])
        before = graphs.count if graphs else None
        assert before is None or before > 0
        with torch._dynamo.config.patch(error_on_recompile=True):
            for move in moves:
                learner.set_hyperparameters(move)
                learner.train([slot])
        if graphs:
            assert graphs.count == before, f"{names}: {graphs.count - before} graph(s) compiled"
        for move in moves:
            eager.set_hyperparameters(move)
            eager.train([slot])
            unmoved.train([slot])
    finally:
        store.close()
    got, want, old = _params(learner), _params(eager), _params(unmoved)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(got, want, **tol)
    assert not torch.allclose(got, old, **tol), f"{names}: the moves changed nothing"


def test_every_algorithm_with_a_compile_setting_is_covered():
    """SAC and DQN compile nothing; an algorithm that comes to compile must join COMPILED."""
    compiling = {
        a.name
        for a in algorithms()
        if "compile" in {f.name for f in dataclasses.fields(a.hyperparameters)}
    }
    assert compiling == {algo for algo, _, _ in COMPILED.values()}


@pytest.mark.parametrize(("path", "name"), CASES)
def test_a_mutable_setting_moved_by_pbt_recompiles_no_step_and_acts(path, name, graphs):
    _assert_moves_recompile_nothing_and_act(path, [name], graphs)


@pytest.mark.slow  # compiles with inductor: ~20-45 s
def test_every_mutable_setting_moved_in_turn_recompiles_no_inductor_step():
    """As above with the compile asyncrl runs (inductor): the step of the issue's report (a
    population on CartPole, ent_coef moved, ``torch._dynamo hit config.recompile_limit``)."""
    _assert_moves_recompile_nothing_and_act("ppo, mlp step", list(algorithm("ppo").mutable), None)
