"""envs.make_env: what making an env leaves behind besides the env."""

import warnings

import mujoco
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
