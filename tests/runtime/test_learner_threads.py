"""A population's learner processes with threads_learner 0 (the pixels presets): each sets
its share of the CPUs, in its loop and its optimizer thread, not every CPU each."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from asyncrl.config import cpus_allowed
from asyncrl.envs import check_env
from asyncrl.settings import TrainConfig, for_env, policy_config, resolve, validate


def _learner_child(*args) -> None:
    """learner_main as the driver starts it, its "ready" reply carrying the torch threads its
    loop set and those its optimizer thread sets (learner_threads of the learner's config)."""
    import torch

    from asyncrl.config import learner_threads
    from asyncrl.runtime import learners

    counters = learners.counters
    learners.counters = lambda learner: {
        **counters(learner),
        "threads": torch.get_num_threads(),
        "optimizer_threads": learner_threads(learner.cfg),
    }
    learners.learner_main(*args)


@pytest.mark.slow  # a spawned learner process imports torch: about 20 s on 2 busy cores
@pytest.mark.skipif(cpus_allowed() < 2, reason="one CPU: every share is the whole of it")
def test_a_learner_process_of_two_sets_half_the_cpus():
    from asyncrl.algos import algorithm
    from asyncrl.nets import FlatParams
    from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout

    given = TrainConfig(
        algo="sac", env="Pendulum-v1", policies=2, envs_per_actor=2, backend="process",
        mode="async", threads_learner=0, hidden=[8], buffer_size=1000, learning_starts=100,
    )  # fmt: skip
    cfg = resolve(given, "classic")
    validate(cfg)
    spec = check_env(cfg.env)
    cfg, _ = for_env(cfg, spec, given)
    pcfg = policy_config(cfg, 1)
    ctx = mp.get_context("spawn")
    slots = SlotStore(rollout_layout(pcfg, spec, algorithm(pcfg.algo)), 1, shared=True)
    store = PolicyStore(FlatParams(algorithm("sac").acting_module(cfg, spec)).numel, shared=True)
    failures, outbox = ctx.Pipe(duplex=False)
    cmd_r, commands = ctx.Pipe(duplex=False)
    replies, rep_w = ctx.Pipe(duplex=False)
    args = (outbox, 1, pcfg, spec, algorithm("sac"), slots, store, cmd_r, rep_w, None, None, False)
    args += (os.getpid(),)
    child = ctx.Process(target=_learner_child, args=args, daemon=True)
    child.start()
    try:
        for end in (outbox, cmd_r, rep_w):
            end.close()
        assert replies.poll(300), failures.recv() if failures.poll(1) else "no reply"
        what, c, *_ = replies.recv()
        commands.send(("stop",))
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
        slots.close()
        store.close()
    share = max(1, cpus_allowed() // 2)
    assert what == "ready" and (c["threads"], c["optimizer_threads"]) == (share, share), c
