"""Pixels end to end: uint8 observations travel unconverted to the network's first layer, the
CNN encoder learns a task that needs the pixels, Atari's preprocessing and training wrapper,
and EnvPool as a vectoriser with the semantics of Gymnasium's."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import asyncrl
from asyncrl.algos import algorithm
from asyncrl.algos.ppo.learner import PPOLearner
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.config import ConfigError
from asyncrl.envs import AtariTraining, check_env, env_family
from asyncrl.learning.offpolicy import MEMORY_SHARE
from asyncrl.nets import ImageEncoder, choose_encoder
from asyncrl.replay import FrameReplay
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, for_env, resolve

DOT = "fake_envs:DotSide-v0"
DOT_BYTES = 12 * 12  # one uint8 observation
# a replay row of DotSideContinuous: the observation once (the frames layout), a float32 action,
# a float32 reward and five one-byte fields (replay.frames)
DOT_ROW = DOT_BYTES + 4 + 4 + 5


def _resolved(env: str, **kw) -> tuple[TrainConfig, object]:
    given = TrainConfig(env=env, **kw)
    cfg = resolve(given, env_family(env))
    spec = check_env(env, cfg.atari_preprocessing, cfg.vectorizer)
    cfg, _ = for_env(cfg, spec, given)
    return cfg, spec


def _input_dtypes(module: torch.nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    module.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    return seen


# ------------------------------------------------------------------ encoder
def test_auto_encoder_is_cnn_for_uint8_images_only():
    assert choose_encoder("auto", check_env(DOT)) == "cnn"
    assert choose_encoder("auto", check_env("fake_envs:DotSideHWC-v0")) == "cnn"
    assert choose_encoder("auto", check_env("CartPole-v1")) == "mlp"
    assert choose_encoder("auto", check_env("fake_envs:FakeLives-v0")) == "mlp"  # uint8, rank 1
    assert choose_encoder("mlp", check_env(DOT)) == "mlp"


def test_nature_torso_has_cleanrls_shape_and_parameter_count():
    spec = check_env("CartPole-v1")  # only its action count matters to the heads
    spec = type(spec)("atari", (4, 84, 84), True, (), 4, obs_dtype="uint8")
    net = build_policy(spec, [512], "tanh", False, "auto")
    convs = [m for m in net.encoder.net if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (32, 8, 4),
        (64, 4, 2),
        (64, 3, 1),
    ]
    # CleanRL's ppo_atari Agent for a 4-action game: 1,686,693 parameters
    assert sum(p.numel() for p in net.parameters()) == 1_686_693


def test_hwc_and_chw_images_give_the_same_features():
    chw, hwc = ImageEncoder((3, 40, 40), [16]), ImageEncoder((40, 40, 3), [16])
    assert not chw.hwc and hwc.hwc
    hwc.load_state_dict(chw.state_dict())
    img = torch.randint(0, 256, (5, 3, 40, 40), dtype=torch.uint8)
    torch.testing.assert_close(chw(img), hwc(img.permute(0, 2, 3, 1)))


# ------------------------------------------------------------------ dtypes and memory
def test_uint8_observations_reach_the_network_unconverted_in_actor_and_learner():
    cfg, spec = _resolved(DOT, envs_per_actor=4, rollout=8, actors=1, minibatch_size=32)
    assert spec.obs_dtype == "uint8" and cfg.encoder == "cnn"
    layout = rollout_layout(cfg, spec, algorithm(cfg.algo))
    slots = SlotStore(layout, 1, shared=False)
    learner = PPOLearner(cfg, spec)
    store = PolicyStore(learner.flat.numel, shared=False)
    learner.publish(store)
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    acting = _input_dtypes(actor.policy.encoder)
    learning = _input_dtypes(learner.policy.encoder)
    try:
        actor.collect(slots.slots[0])
        slot = slots.slots[0]
        assert slot.obs.dtype == np.uint8 and slot.obs.shape == (9, 4, 1, 12, 12)
        assert set(np.unique(slot.obs)) == {0, 255}  # frames as the env made them
        # memory: the observations of a slot are (T + 1) x K uint8 images, nothing more
        assert slot.obs.nbytes == 9 * 4 * DOT_BYTES
        learner.train([slot])
    finally:
        actor.close()
        slots.close()
        store.close()
    assert acting and set(acting) == {torch.uint8}
    assert learning and set(learning) == {torch.uint8}


def test_sac_replay_keeps_uint8_and_trains_on_it():
    from asyncrl.algos.sac.learner import SACLearner

    cfg, spec = _resolved(
        "fake_envs:DotSideContinuous-v0",
        algo="sac",
        mode="sync",
        backend="inline",
        actors=1,
        envs_per_actor=4,
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
        hidden=[32],
    )
    learner = SACLearner(cfg, spec)
    # image observations are stored once, as uint8 frames (next observations are later rows)
    assert isinstance(learner.replay, FrameReplay) and learner.replay.frames.dtype == np.uint8
    assert learner.replay.bytes_per_transition == DOT_ROW
    assert learner.replay.frames.nbytes == 64 * DOT_BYTES
    layout = rollout_layout(cfg, spec, algorithm(cfg.algo))
    assert dict((n, d) for n, _, d in layout.fields)["final_obs"] == "uint8"
    slots = SlotStore(layout, 1, shared=False)
    store = PolicyStore(learner.flat.numel, shared=False)
    learner.publish(store)
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    seen = _input_dtypes(learner.sac.q.encoder)
    try:
        for _ in range(4):
            actor.collect(slots.slots[0])
            learner.train([slots.slots[0]])
            learner.publish(store)
    finally:
        actor.close()
        slots.close()
        store.close()
    assert learner.updates > 0 and set(seen) == {torch.uint8}
    assert len(learner.replay) == 16


def test_a_replay_buffer_larger_than_the_memory_available_is_refused_before_the_run(
    tmp_path, monkeypatch
):
    import asyncrl.system as system

    per = DOT_ROW  # as the buffer allocates it (see the test above)
    monkeypatch.setattr(system, "available_memory", lambda: (1000 * per - 1, "MemAvailable"))
    kw = dict(algo="sac", backend="inline", actors=1, envs_per_actor=2, batch_size=8)
    kw.update(learning_starts=8, total_steps=64)
    with pytest.raises(ConfigError) as e:
        asyncrl.train(
            DOT.replace("DotSide", "DotSideContinuous"),
            buffer_size=1000,
            run_dir=str(tmp_path / "r"),
            **kw,
        )
    msg = str(e.value)
    assert (
        msg.startswith("buffer_size: 1,000 transitions of 157 B need 157,000 B") and "\n" not in msg
    )
    assert "156,999 B (0.00 GB) is available (MemAvailable)" in msg
    assert not (tmp_path / "r").exists()  # refused before the run dir, let alone a process
    # one transition fewer than the memory holds is accepted
    cfg, _ = _resolved(DOT.replace("DotSide", "DotSideContinuous"), buffer_size=999, **kw)
    assert cfg.buffer_size == 999


def test_a_presets_replay_buffer_that_does_not_fit_is_reduced_to_what_fits(tmp_path, monkeypatch):
    """With no --buffer-size, a preset's 1M transitions are cut to what fits, in one line,
    where a given size is refused (the test above)."""
    import asyncrl.system as system

    env = DOT.replace("DotSide", "DotSideContinuous")
    monkeypatch.setattr(system, "available_memory", lambda: (5000 * DOT_ROW, "MemAvailable"))
    given = TrainConfig(env=env, algo="sac", learning_starts=100)
    spec = check_env(env)
    cfg, lines = for_env(resolve(given, env_family(env)), spec, given)
    assert cfg.buffer_size == int(MEMORY_SHARE * 5000) == 2500  # half of what is available
    assert len(lines) == 1 and lines[0].startswith("asyncrl: buffer_size 1,000,000 -> 2,500: ")
    assert "buffer takes 50% of it (--buffer-size sets it)" in lines[0]
    # fewer than learning_starts would fit: refused, naming the way out
    small = TrainConfig(env=env, algo="sac", learning_starts=2600)
    with pytest.raises(ConfigError, match="fewer than learning_starts 2,600"):
        for_env(resolve(small, env_family(env)), spec, small)


def test_a_populations_replay_buffers_are_checked_together_against_the_memory(
    tmp_path, monkeypatch
):
    """Each policy's learner allocates a buffer of its own: P of them must fit, a given size
    whose P buffers do not is refused in one line naming buffer_size and policies, before
    the run dir exists; a preset's is reduced so that P fit."""
    import asyncrl.system as system

    env = DOT.replace("DotSide", "DotSideContinuous")
    per = DOT_ROW  # as the buffer allocates it (see the tests above)
    monkeypatch.setattr(system, "available_memory", lambda: (2000 * per - 1, "MemAvailable"))
    kw = dict(algo="sac", backend="inline", actors=1, envs_per_actor=2, batch_size=8)
    kw.update(learning_starts=8, total_steps=64, policies=2)
    with pytest.raises(ConfigError) as e:  # one buffer of 1,000 fits; two do not
        asyncrl.train(env, buffer_size=1000, run_dir=str(tmp_path / "r"), **kw)
    msg = str(e.value)
    assert msg.startswith(
        "buffer_size: 1,000 transitions of 157 B in each of 2 policies' replay buffers "
        "(policies 2) need 314,000 B"
    ), msg
    assert "313,999 B (0.00 GB) is available (MemAvailable)" in msg and "\n" not in msg
    assert msg.endswith("lower --buffer-size or --policies"), msg
    assert not (tmp_path / "r").exists()  # refused before the run dir, let alone a process
    cfg, _ = _resolved(env, buffer_size=999, **kw)  # two of 999 fit
    assert cfg.buffer_size == 999
    # a preset's: half of what is available, shared by the two buffers
    monkeypatch.setattr(system, "available_memory", lambda: (5000 * per, "MemAvailable"))
    given = TrainConfig(env=env, algo="sac", learning_starts=100, policies=2, envs_per_actor=2)
    cfg, lines = for_env(resolve(given, env_family(env)), check_env(env), given)
    assert cfg.buffer_size == 1250
    assert len(lines) == 1 and lines[0].startswith("asyncrl: buffer_size 1,000,000 -> 1,250: ")
    assert "in each of 2 policies' replay buffers" in lines[0]


CAR_BYTES = 96 * 96 * 3 + 3 * 4 + 4 + 5  # one RGB frame, 3 float32 actions, reward, 5 flags


def _declared_car_racing_spec():
    """CarRacing-v3's spec built from the spaces Gymnasium declares for it (no Box2D needed)."""
    from asyncrl.envs.spec import spec_from_spaces

    obs = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
    act = gym.spaces.Box(np.array([-1, 0, 0], np.float32), np.ones(3, np.float32))
    return spec_from_spaces("CarRacing-v3", obs, act)


def _car_racing_spec():
    """CarRacing-v3's spec: read off the env where Box2D is installed, else the declared one."""
    try:
        import Box2D  # noqa: F401
    except ImportError:
        return _declared_car_racing_spec()
    return check_env("CarRacing-v3")


def test_car_racing_sac_stores_each_observation_once_with_no_flag(monkeypatch):
    """#57: SAC on CarRacing-v3 stored two 96x96x3 copies a transition (55,314 B); with no flag
    it stores one frame (at most ~27.7 kB), as the start-up line and the replay both say, and a
    preset's buffer reduced to fit takes half of the memory available."""
    import asyncrl.system as system
    from asyncrl.replay import make_replay
    from asyncrl.runtime.transport import memory_line, rollout_layout

    avail = 10**9
    monkeypatch.setattr(system, "available_memory", lambda: (avail, "MemAvailable"))
    spec = _car_racing_spec()
    assert spec.obs_shape == (96, 96, 3) and spec.obs_dtype == "uint8" and spec.frame_stack == 1
    given = TrainConfig(env="CarRacing-v3", algo="sac")
    cfg = resolve(given, env_family("CarRacing-v3", spec))
    cfg, lines = for_env(cfg, spec, given)
    assert CAR_BYTES <= 27_700
    assert cfg.buffer_size == int(MEMORY_SHARE * avail) // CAR_BYTES
    assert f"of {CAR_BYTES:,} B need" in lines[0] and "buffer takes 50% of it" in lines[0]
    algo = algorithm(cfg.algo)
    line = memory_line(cfg, spec, algo, rollout_layout(cfg, spec, algo))
    assert f"replay {CAR_BYTES:,} B per transition" in line
    assert "(each frame stored once; 55,314 B with whole observations)" in line
    replay = make_replay(cfg, spec)
    assert isinstance(replay, FrameReplay) and replay.bytes_per_transition == CAR_BYTES
    assert replay.nbytes <= (cfg.buffer_size + 1) * CAR_BYTES  # rounded up to whole rows


def test_car_racing_spec_is_the_one_gymnasium_makes():
    """The declared spec (used where Box2D is absent) is field for field the real env's."""
    pytest.importorskip("Box2D")
    declared, made = _declared_car_racing_spec(), check_env("CarRacing-v3")
    for field in dataclasses.fields(made):
        a, b = getattr(declared, field.name), getattr(made, field.name)
        if isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            assert a == b, field.name


def test_an_unstacked_image_env_stores_each_observation_once_and_learns_from_the_first_insert(
    tmp_path, capsys
):
    """Any image env, stacked or not, gets the frames layout: the start-up line and the replay
    say one observation per transition; and a transition is drawable as soon as it is inserted
    (learning_starts of one env step's transitions: the first update follows the first insert)."""
    from asyncrl.algos.sac.learner import SACLearner

    seen: list = []
    real = SACLearner.train

    def keep(self, slots):
        seen.append(self.replay)
        return real(self, slots)

    mp = pytest.MonkeyPatch()
    mp.setattr(SACLearner, "train", keep)
    try:
        result = asyncrl.train(
            "fake_envs:DotSideContinuous-v0",
            algo="sac",
            backend="inline",
            mode="sync",
            actors=1,
            envs_per_actor=2,
            hidden=[16],
            batch_size=2,
            learning_starts=1,
            buffer_size=64,
            total_steps=32,
            progress=False,
            tensorboard=False,
            run_dir=str(tmp_path / "run"),
        )
    finally:
        mp.undo()
    assert isinstance(seen[-1], FrameReplay) and seen[-1].bytes_per_transition == DOT_ROW
    out = capsys.readouterr().out
    assert f"replay {DOT_ROW:,} B per transition" in out
    assert f"each frame stored once; {2 * DOT_BYTES + 4 + 4 + 2:,} B with whole" in out
    assert result.summary["gradient_steps"] == 32 - 1  # replay ratio 1 from the first insert


def test_available_memory_is_a_positive_figure_with_its_source():
    from asyncrl.system import available_memory

    avail, source = available_memory()
    assert avail > 0 and source in ("MemAvailable", "free physical pages", "cgroup memory.max")


def test_startup_line_states_bytes_per_sample(tmp_path, capsys):
    asyncrl.train(
        DOT,
        total_steps=64,
        backend="inline",
        actors=1,
        envs_per_actor=2,
        rollout=32,
        minibatch_size=32,
        run_dir=str(tmp_path / "r"),
        progress=False,
        tensorboard=False,
    )
    out = capsys.readouterr().out
    # 144 B of uint8 image, the rest per sample are action, reward, flags, log-prob, ...
    assert "asyncrl: observations uint8 (1, 12, 12), 144 B each; rollout slots " in out
    per_sample = float(out.split("rollout slots ")[1].split(" B per sample")[0].replace(",", ""))
    assert 144 < per_sample < 144 + 64 + 64  # float32 frames would be 576 B


def test_norm_obs_is_refused_for_uint8_obs_when_given_and_skipped_when_a_preset_set_it():
    spec = check_env(DOT)
    given = TrainConfig(env=DOT, norm_obs=True)
    with pytest.raises(ConfigError, match=r"^norm_obs: .* uint8 observations"):
        for_env(resolve(given, "classic"), spec, given)
    given = TrainConfig(env=DOT, preset="mujoco")  # a preset that normalises observations
    cfg, lines = for_env(resolve(given), spec, given)
    assert cfg.norm_obs is False
    assert lines == [
        f"asyncrl: norm_obs off: {DOT} has uint8 observations, which the network scales by "
        "1/255 instead (preset mujoco would normalise them)"
    ]


def test_cnn_on_vector_observations_is_one_line_naming_encoder(tmp_path):
    with pytest.raises(ConfigError, match=r"^encoder: cnn needs image observations of rank 3"):
        asyncrl.train("CartPole-v1", encoder="cnn", run_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_cnn_policy_learns_a_task_that_needs_the_pixels(tmp_path):
    """DotSide: the reward depends only on which half of the image holds the dot; random
    play returns 4 of 8. PPO with the (small-image) CNN, sync inline on a fixed seed: ~25 s.
    The classic preset named, as auto chose it when this was measured: auto now gives an image
    env the pixels preset, Atari's settings for 10M-step runs."""
    run = tmp_path / "dot"
    result = asyncrl.train(
        DOT,
        preset="classic",
        total_steps=16_384,
        mode="sync",
        backend="inline",
        seed=1,
        run_dir=str(run),
        progress=False,
        tensorboard=False,
    )
    assert result.config.encoder == "cnn"
    assert result.summary["last100_return"] >= 6.5  # measured 7.55 (seed 1); random: 4
    # the checkpoint loads and acts on uint8 images as training did
    policy = asyncrl.load(run)
    assert policy.evaluate(episodes=10).mean_return >= 7.0


# ------------------------------------------------------------------ Atari
def _fake_lives_vector(num_envs: int = 2) -> AtariTraining:
    inner = gym.vector.SyncVectorEnv(
        [lambda: gym.make("fake_envs:FakeLives-v0")] * num_envs,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    return AtariTraining(inner)


def test_atari_training_ends_an_episode_per_life_and_logs_the_games_unclipped_score():
    envs = _fake_lives_vector()
    obs, _ = envs.reset(seed=[0, 1])
    rows = []
    for _ in range(16):
        obs, reward, terminated, truncated, info = envs.step(np.zeros(2, np.int64))
        rows.append((obs[0, 0], reward[0], terminated[0], info["episode_score"][0]))
        if terminated[0]:
            assert info["final_obs"][0] is not None
    steps = [i + 1 for i, row in enumerate(rows) if row[2]]
    assert steps == [5, 10, 15]  # one training episode per life
    assert all(row[1] == 1.0 for row in rows)  # rewards of 3 clipped to 1 for training
    # lives lost before the last: the game went on (the obs counts on, no reset)
    assert [row[0] for row in rows[4:6]] == [5, 6]
    scores = [row[3] for row in rows if not np.isnan(row[3])]
    assert scores == [45.0]  # the whole game, 3 lives x 5 steps x 3, unclipped
    assert rows[15][0] == 1  # the game over reset the env
    envs.close()


def test_actor_logs_game_scores_not_per_life_returns(monkeypatch):
    """Through the actor: the slot's episode returns are whole games, unclipped."""
    from asyncrl.runtime import actor as actor_module

    cfg, spec = _resolved("fake_envs:FakeLives-v0", envs_per_actor=2, rollout=32, actors=1)
    make = actor_module.make_vector_env  # FakeLives is no ALE id: wrap it as one is wrapped
    monkeypatch.setattr(
        actor_module, "make_vector_env", lambda *a, **kw: AtariTraining(make(*a, **kw))
    )
    layout = rollout_layout(cfg, spec, algorithm(cfg.algo))
    slots = SlotStore(layout, 1, shared=False)
    learner = PPOLearner(cfg, spec)
    store = PolicyStore(learner.flat.numel, shared=False)
    learner.publish(store)
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    try:
        actor.collect(slots.slots[0])
        slot = slots.slots[0]
        returns = slot.ep_returns[~np.isnan(slot.ep_returns)]
        assert sorted(returns.tolist()) == [45.0] * 4  # 2 games of each of 2 envs
        assert sorted(slot.ep_lengths[slot.ep_lengths > 0].tolist()) == [15] * 4
        assert slot.terminated.sum() == 2 * 6  # 3 lives a game
        assert set(np.unique(slot.rewards)) == {1.0}
    finally:
        actor.close()
        slots.close()
        store.close()


def _need_atari():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")


def test_ale_ids_are_the_atari_family_and_preprocessed():
    _need_atari()
    assert env_family("ALE/Breakout-v5") == "atari"
    spec = check_env("ALE/Breakout-v5")
    assert (spec.obs_shape, spec.obs_dtype, spec.discrete) == ((4, 84, 84), "uint8", True)
    raw = check_env("ALE/Breakout-v5", atari_preprocessing=False)
    assert raw.obs_shape == (210, 160, 3)
    cfg = resolve(TrainConfig(env="ALE/Breakout-v5"), "atari")
    assert (cfg.lr, cfg.clip_coef, cfg.ent_coef, cfg.epochs, cfg.rollout) == (
        2.5e-4,
        0.1,
        0.01,
        4,
        128,
    )
    assert (cfg.hidden, cfg.minibatch_size, cfg.envs_per_actor) == ([512], 256, 8)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "vectorizer"), [("sync", "gymnasium"), ("async", "gymnasium"), ("async", "envpool")]
)
def test_atari_runs_through_the_pipeline(tmp_path, mode, vectorizer):
    _need_atari()
    if vectorizer == "envpool":
        pytest.importorskip("envpool")
    result = asyncrl.train(
        "ALE/Breakout-v5",
        vectorizer=vectorizer,
        mode=mode,
        backend="process",
        actors=2,
        envs_per_actor=2,
        rollout=32,
        minibatch_size=64,
        total_steps=512,
        run_dir=str(tmp_path / "r"),
        progress=False,
        tensorboard=False,
    )
    assert result.summary["env_steps"] == 512
    assert result.config.encoder == "cnn" and result.config.preset == "atari"
    policy = asyncrl.load(tmp_path / "r")
    obs = np.zeros((4, 84, 84), np.uint8)
    assert 0 <= policy.act(obs) < 4


# ------------------------------------------------------------------ EnvPool
def _need_envpool():
    return pytest.importorskip("envpool")


def test_envpool_refuses_an_id_it_does_not_provide_in_one_line(tmp_path):
    _need_envpool()
    with pytest.raises(ConfigError, match=r"^vectorizer: envpool provides MuJoCo v5 and Atari"):
        asyncrl.train("CartPole-v1", vectorizer="envpool", run_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match=r"^vectorizer: envpool provides"):
        asyncrl.train("Hopper-v4", vectorizer="envpool", run_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_envpool_refuses_per_env_restarts():
    _need_envpool()
    with pytest.raises(ConfigError, match=r"^on_env_error: restart"):
        asyncrl.train("Hopper-v5", vectorizer="envpool", on_env_error="restart")


_KEEPS_FRAME = """
import gc, weakref
from asyncrl.envs import import_envpool


class Held:  # stands for the status row an actor holds while it first imports envpool
    pass


def first_import():
    held = Held()
    import_envpool()
    return weakref.ref(held)


ref = first_import()
gc.collect()
print("alive" if ref() is not None else "freed")
"""


def test_importing_envpool_keeps_no_frame_of_its_importer_alive():
    # EnvPool keeps an ImportError (procgen without Qt) whose traceback held the importer's
    # frames; in an actor those hold a view of shared memory (BufferError at exit). The first
    # import is what counts, so it happens in a fresh interpreter.
    _need_envpool()
    out = subprocess.run(
        [sys.executable, "-c", _KEEPS_FRAME], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "freed"


@pytest.mark.slow
def test_envpool_on_the_process_backend_closes_its_shared_memory_cleanly(tmp_path):
    _need_envpool()
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--env", "HalfCheetah-v5"]
    cmd += ["--vectorizer", "envpool", "--backend", "process", "--total-steps", "2048"]
    cmd += ["--no-progress", "--no-tensorboard", "--run-dir", str(tmp_path / "r")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "r" / "summary.json").exists()
    assert "BufferError" not in out.stderr, out.stderr[-2000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]


def _episodes(envs, actions, steps: int, seeds: list[int]):
    """(step, env, terminated, truncated, return) of every episode end, and whether each end
    came with a final observation other than the next episode's first."""
    envs.reset(seed=seeds)
    total = np.zeros(len(seeds))
    ends = []
    for t in range(steps):
        obs, reward, terminated, truncated, info = envs.step(actions)
        total += reward
        for i in np.flatnonzero(terminated | truncated):
            final = np.asarray(info["final_obs"][i])
            ends.append((t, int(i), bool(terminated[i]), bool(truncated[i]), float(total[i])))
            assert final.shape == obs[i].shape and not np.array_equal(final, obs[i])
            total[i] = 0.0
    envs.close()
    return ends


@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5"])
def test_envpool_and_gymnasium_agree_on_episode_boundaries_and_returns(env_id):
    """Standing still (zero actions) with a 25-step time limit: both truncate at the same steps,
    never terminate, hand over a final observation for the bootstrap, and return nearly the
    same. Exactly the same is not possible: EnvPool draws the initial states from its own
    random stream, so the same seed is not the same start."""
    _need_envpool()
    from asyncrl.envs import EnvPoolVectorEnv

    gym_envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id, max_episode_steps=25)] * 2,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    pool = EnvPoolVectorEnv(env_id, 2, {"max_episode_steps": 25})
    zeros = np.zeros((2, gym_envs.single_action_space.shape[0]), np.float32)
    ours = _episodes(pool, zeros, 60, [3, 4])
    theirs = _episodes(gym_envs, zeros, 60, [3, 4])
    assert [e[:4] for e in ours] == [e[:4] for e in theirs]
    assert [e[:4] for e in ours] == [(24, 0, False, True), (24, 1, False, True)] + [
        (49, 0, False, True),
        (49, 1, False, True),
    ]
    if env_id == "Hopper-v5":  # ~1 a step for staying alive: returns within 2 %
        np.testing.assert_allclose([e[4] for e in ours], [e[4] for e in theirs], rtol=0.02)


def test_envpool_through_the_actor_bootstraps_truncations_and_sums_returns():
    """Hopper falls (terminated) under large constant torques; the actor's slot holds the same
    kind of record with EnvPool as with Gymnasium: each episode's logged return is the sum of
    its rewards, and no truncation without a bootstrap value."""
    _need_envpool()
    for vectorizer in ("gymnasium", "envpool"):
        cfg, spec = _resolved(
            "Hopper-v5", vectorizer=vectorizer, envs_per_actor=2, rollout=64, actors=1
        )
        layout = rollout_layout(cfg, spec, algorithm(cfg.algo))
        slots = SlotStore(layout, 1, shared=False)
        learner = PPOLearner(cfg, spec)
        store = PolicyStore(learner.flat.numel, shared=False)
        learner.publish(store)
        actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
        try:
            actor.collect(slots.slots[0])
            s = slots.slots[0]
            ends = np.argwhere(s.terminated | s.truncated)
            assert len(ends) >= 2, vectorizer  # a random Hopper falls within 64 steps
            start = np.zeros(2, int)
            for t, i in sorted(ends.tolist()):
                assert s.ep_returns[t, i] == pytest.approx(s.rewards[start[i] : t + 1, i].sum())
                assert s.ep_lengths[t, i] == t + 1 - start[i]
                start[i] = t + 1
            assert (s.trunc_values[s.truncated & ~s.terminated] != 0).all()
        finally:
            actor.close()
            slots.close()
            store.close()


def test_envpool_breakout_matches_the_gymnasium_preprocessing_and_loses_lives():
    _need_atari()
    _need_envpool()
    from asyncrl.envs import envpool_task, make_vector_env

    task, options = envpool_task("ALE/Breakout-v5")
    assert task == "Breakout-v5"
    assert options["repeat_action_probability"] == 0.25  # Gymnasium's v5: sticky actions
    assert options["use_fire_reset"] is False and options["episodic_life"] is False
    envs = make_vector_env("ALE/Breakout-v5", 2, vectorizer="envpool")
    obs, info = envs.reset(seed=[1, 2])
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert list(info["lives"]) == [5, 5]
    lives_lost = 0
    rng = np.random.default_rng(0)
    for _ in range(400):
        obs, reward, terminated, truncated, info = envs.step(rng.integers(0, 4, 2))
        assert set(np.unique(reward)) <= {0.0, 1.0}
        lives_lost += int(terminated.sum())
    envs.close()
    assert lives_lost >= 2  # random play loses lives; each ends a training episode
