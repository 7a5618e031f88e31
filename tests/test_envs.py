"""envs.make_env: what making an env leaves behind besides the env; the actors' vector env."""

import warnings

import mujoco
import numpy as np
import pytest

from asyncrl.envs import make_env


def test_mujoco_model_warnings_become_python_warnings_not_a_log_file(tmp_path, monkeypatch, capfd):
    """Gymnasium's HalfCheetah model makes MuJoCo warn (a deprecated XML attribute). That
    warning comes as a Python DeprecationWarning; nothing is printed by MuJoCo itself and no
    MUJOCO_LOG.TXT appears in the working directory; MuJoCo's hook is as it was afterwards."""
    monkeypatch.chdir(tmp_path)
    before = mujoco.get_mju_user_warning()
    with pytest.warns(DeprecationWarning, match=r"MuJoCo \(HalfCheetah-v5\): .*settotalmass"):
        env = make_env("HalfCheetah-v5")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()
    assert mujoco.get_mju_user_warning() is before
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert "settotalmass" not in capfd.readouterr().err


def test_without_the_hook_mujoco_would_print_and_log_the_warning(tmp_path, monkeypatch, capfd):
    """The check above would pass vacuously if this MuJoCo no longer warned: made directly, the
    same model still prints the warning and writes MUJOCO_LOG.TXT here."""
    import gymnasium as gym

    monkeypatch.chdir(tmp_path)
    gym.make("HalfCheetah-v5").close()
    assert "settotalmass" in capfd.readouterr().err
    assert (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_a_mujoco_env_whose_model_is_clean_warns_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_env("Hopper-v5").close()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def _same(a, b) -> bool:
    """Equal values and types, through dicts and object arrays (final_obs, final_info)."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) and a.dtype == object:
        return b.dtype == object and a.shape == b.shape and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and (a == b or (a != a and b != b))


@pytest.mark.parametrize(
    "env_id, K",
    [
        ("CartPole-v1", 3),  # Discrete actions (batched: MultiDiscrete)
        ("Pendulum-v1", 2),  # Box actions, float64 observations made float32
        ("fake_envs:FakeLives-v0", 2),  # uint8 observations, an info at every step and reset
        ("fake_envs:MultiDiscreteActions-v0", 2),
        ("fake_envs:CountdownTerminates-v0", 3),  # terminations and truncations
    ],
)
def test_the_actors_vector_env_steps_as_gymnasiums_same_step_vector_env(env_id, K):
    """SameStepVectorEnv's own step gives what Gymnasium's SyncVectorEnv (same-step autoreset)
    gives over the same envs, seeds and actions: observations, rewards, ends and every info
    (final observations and infos included), value and type alike, 300 steps."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from asyncrl.envs.make import SameStepVectorEnv, resolve_id

    fns = [lambda: gym.make(resolve_id(env_id)) for _ in range(K)]
    ours = SameStepVectorEnv(fns)
    theirs = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    assert ours._rows  # the fast path is the one compared
    seeds = list(range(K))
    assert _same(ours.reset(seed=seeds), theirs.reset(seed=seeds))
    ours.action_space.seed(1)
    ends = 0
    for _ in range(300):
        actions = ours.action_space.sample()
        a, b = ours.step(actions), theirs.step(actions)
        assert _same(a, b)
        ends += int(a[2].sum() + a[3].sum())
    assert ends > 0  # episodes ended: the final observations were compared
    ours.close()
    theirs.close()
