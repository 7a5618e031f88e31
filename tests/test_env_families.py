"""Env families told by what the env is; the generic preset for an env no family claims; values
tuned on one env given to that env alone, and named with it in the preset line."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

from asyncrl.cli import main
from asyncrl.envs import check_env, env_family
from asyncrl.settings import TrainConfig, preset_line, resolve

COUNTDOWN = "fake_envs:Countdown-v0"  # the suite's own env: no family claims it
GENERIC_PPO_LINE = (
    f"asyncrl: preset generic (auto: {COUNTDOWN}) for ppo: gamma 0.99, gae_lambda 0.95, "
    "lr 0.0003, lr_schedule constant, epochs 10, minibatch_size 64, rollout 128, hidden 64,64, "
    "norm_obs off, norm_reward off, total_steps 1000000"
)


class ThirdPartyHopper(HopperEnv):
    """A MuJoCo robot that another package registers (as Gymnasium-Robotics does its own)."""


gym.register("ThirdPartyHopper-v0", entry_point=ThirdPartyHopper, max_episode_steps=1000)


@pytest.mark.parametrize(
    ("env", "family"),
    [
        ("CartPole-v1", "classic"),
        ("Acrobot-v1", "classic"),
        ("MountainCarContinuous-v0", "classic"),
        ("LunarLander-v3", "box2d"),  # told from the registration: no Box2D needed
        ("BipedalWalker-v3", "box2d"),
        ("Ant-v5", "mujoco"),
        ("ThirdPartyHopper-v0", "mujoco"),  # by its class, whatever registers it
        ("FrozenLake-v1", "generic"),
        (COUNTDOWN, "generic"),
    ],
)
def test_the_family_is_what_the_env_is(env, family):
    assert env_family(env) == family


def test_image_observations_outside_ale_are_the_pixels_family():
    dot = "fake_envs:DotSide-v0"
    assert env_family(dot) == "generic"  # nothing in its registration says pixels
    assert env_family(dot, check_env(dot)) == "pixels"
    assert env_family("CartPole-v1", check_env("CartPole-v1")) == "classic"
    # uint8 but not an image: not pixels
    assert env_family("fake_envs:FakeLives-v0", check_env("fake_envs:FakeLives-v0")) == "generic"


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="no atari extra")
def test_ale_images_stay_atari():
    assert env_family("ALE/Pong-v5", check_env("ALE/Pong-v5")) == "atari"


def test_an_env_no_family_claims_takes_the_fields_generic_ppo_defaults():
    given = TrainConfig(env=COUNTDOWN)
    cfg = resolve(given, env_family(COUNTDOWN))
    assert cfg.preset == "generic"
    assert (cfg.gamma, cfg.gae_lambda, cfg.lr, cfg.epochs, cfg.minibatch_size) == (
        0.99,
        0.95,
        3e-4,
        10,
        64,
    )
    assert (cfg.clip_coef, cfg.norm_adv, cfg.value_clip, cfg.ent_coef) == (0.2, True, 0.0, 0.0)
    assert cfg.lr_schedule == "constant"  # SB3's (CleanRL anneals; measured: docs, presets)
    assert cfg.actors * cfg.envs_per_actor * cfg.rollout == 2048  # SB3's and CleanRL's batch
    assert (cfg.norm_obs, cfg.norm_reward) == (False, False)
    assert preset_line(given, cfg) == GENERIC_PPO_LINE


@pytest.mark.parametrize("env", ["Acrobot-v1", "Pendulum-v1", "MountainCar-v0"])
def test_cartpoles_tuning_is_for_cartpole_alone(env):
    cfg = resolve(TrainConfig(env=env), env_family(env))
    assert cfg.preset == "classic"
    assert (cfg.gamma, cfg.gae_lambda, cfg.lr, cfg.rollout) == (0.99, 0.95, 3e-4, 128)
    assert (cfg.norm_obs, cfg.norm_reward, cfg.lr_schedule) == (True, True, "constant")
    line = preset_line(TrainConfig(env=env), cfg)
    assert line.startswith(f"asyncrl: preset classic (auto: {env}) for ppo: gamma 0.99, ")
    assert "tuned" not in line


def test_the_preset_line_names_what_was_tuned_on_which_env():
    given = TrainConfig(env="CartPole-v1")
    line = preset_line(given, resolve(given, "classic"))
    assert line == (
        "asyncrl: preset classic (auto: CartPole-v1) for ppo: epochs 10, minibatch_size 64, "
        "hidden 64,64, total_steps 150000; tuned on CartPole-v1: gamma 0.98, gae_lambda 0.8, "
        "lr 0.0005, lr_schedule linear, rollout 32, norm_obs off, norm_reward off"
    )
    # a preset named, not chosen: all of it, the tuned values too, and the line says so
    named = TrainConfig(env="Acrobot-v1", preset="classic")
    cfg = resolve(named)
    assert (cfg.gamma, cfg.rollout) == (0.98, 32)
    assert preset_line(named, cfg).startswith("asyncrl: preset classic for ppo: epochs 10, ")
    assert "; tuned on CartPole-v1: gamma 0.98, " in preset_line(named, cfg)


def test_flags_still_win_over_family_and_tuned_values():
    given = TrainConfig(env="CartPole-v1", gamma=0.9, norm_obs=True, epochs=4)
    cfg = resolve(given, "classic")
    assert (cfg.gamma, cfg.norm_obs, cfg.epochs) == (0.9, True, 4)
    assert (cfg.gae_lambda, cfg.rollout) == (0.8, 32)  # the rest still CartPole's
    line = preset_line(given, cfg)
    assert "gamma" not in line and "norm_obs" not in line and "epochs" not in line
    assert line.endswith("; tuned on CartPole-v1: gae_lambda 0.8, lr 0.0005, lr_schedule "
                         "linear, rollout 32, norm_reward off")  # fmt: skip
    given = TrainConfig(env=COUNTDOWN, rollout=16, norm_reward=True)
    cfg = resolve(given, "generic")
    assert (cfg.rollout, cfg.norm_reward) == (16, True)
    # a given value equal to the tuned one is given all the same
    given = TrainConfig(env="CartPole-v1", **{"gamma": 0.98, "gae_lambda": 0.8})
    assert "gamma" not in preset_line(given, resolve(given, "classic"))


@pytest.mark.parametrize(
    ("env", "family", "box2d"),
    [("LunarLander-v3", "box2d", True), ("Acrobot-v1", "classic", False)],
)
def test_box2d_and_classic_normalise_observations_and_returns(env, family, box2d):
    cfg = resolve(TrainConfig(env=env), family)
    assert (cfg.preset, cfg.norm_obs, cfg.norm_reward, cfg.value_clip) == (family, True, True, 0)
    assert cfg.total_steps == (1_000_000 if box2d else 150_000)
    # the schedule each family's rows of the defaults table favoured (docs, presets)
    assert cfg.lr_schedule == ("linear" if box2d else "constant")


@pytest.mark.parametrize(
    ("env", "steps", "warmup"),
    [
        ("InvertedPendulum-v5", 15_000, 150),  # the short run: not a third at random
        ("HalfCheetah-v5", None, 5000),  # CleanRL's warm-up at the 1M budget
        ("Pendulum-v1", 20_000, 100),  # classic control: SB3's 100 (RL Zoo's classic SAC)
        ("Pendulum-v1", None, 100),
        ("MountainCarContinuous-v0", 5_000, 50),
    ],
)
def test_sac_warms_up_for_at_most_1_percent_of_the_budget_on_one_env_per_actor(env, steps, warmup):
    given = TrainConfig(algo="sac", env=env, total_steps=steps)
    cfg = resolve(given, env_family(env))
    assert (cfg.learning_starts, cfg.envs_per_actor, cfg.rollout) == (warmup, 1, 1)
    assert f"learning_starts {warmup}" in preset_line(given, cfg)
    given = TrainConfig(algo="sac", env=env, total_steps=steps, learning_starts=4000)
    assert resolve(given, env_family(env)).learning_starts == 4000  # a flag wins
    given = TrainConfig(algo="sac", env=env, envs_per_actor=8)
    assert resolve(given, env_family(env)).envs_per_actor == 8


def test_ppo_and_dqn_keep_8_envs_per_actor():
    """The classic family's value; CartPole-v1's DQN values, tuned there, have 4 (test_presets)."""
    for algo in ("ppo", "dqn"):
        assert resolve(TrainConfig(algo=algo, env="Acrobot-v1"), "classic").envs_per_actor == 8


def test_a_pixel_env_trains_with_the_pixels_preset(tmp_path, capsys):
    code = main(
        [
            "train",
            "--env",
            "fake_envs:DotSide-v0",
            "--backend",
            "inline",
            "--actors",
            "1",
            "--envs-per-actor",
            "2",
            "--total-steps",
            "512",
            "--checkpoint-every",
            "0",
            "--no-progress",
            "--no-tensorboard",
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("asyncrl: preset")]
    assert len(lines) == 1
    assert lines[0].startswith(
        "asyncrl: preset pixels (auto: fake_envs:DotSide-v0) for ppo: gamma 0.99, "
        "gae_lambda 0.95, lr 0.00025, lr_schedule linear, epochs 4, minibatch_size 256, "
        "rollout 128, hidden 512, norm_obs off, norm_reward off, clip_coef 0.1, ent_coef 0.01, "
        "threads_learner 0 "
    )
