"""Bad input fails with one clear line naming the field, before any process or segment exists."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import re
import subprocess
import sys

import pytest

from asyncrl.cli import main
from asyncrl.config import ConfigError
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, validate
from conftest import shm_segments

BAD = [
    (["--env", "NoSuchEnv-v9"], "env: 'NoSuchEnv-v9' is not a registered Gymnasium env id"),
    (["--envs-per-actor", "0"], "envs_per_actor: must be >= 1"),
    (["--actors", "0"], "actors: must be >= 1"),
    # a negative seed reached an actor's env reset and failed there, after processes started
    (["--seed", "-3"], "seed: must be >= 0, got -3"),
    (
        ["--minibatch-size", "4096", "--envs-per-actor", "2", "--rollout", "8"],
        "minibatch_size: 4096 is larger than the training batch of 16 samples",
    ),
    (["--env", "Blackjack-v1"], "PPO here needs a Box observation"),
    (["--env", "fake_envs:MultiDiscreteActions-v0"], "PPO handles Discrete and 1-D Box actions"),
    (["--env", "fake_envs:NotThere-v0"], "env: 'NotThere-v0' is not a registered"),
    (["--env", "no_such_module:X-v0"], "cannot import module 'no_such_module'"),
    (["--max-batches-waiting", "-1"], "max_batches_waiting: must be >= 0"),
    (["--mode", "async", "--rollouts-per-batch", "-1"], "rollouts_per_batch: must be >= 1"),
    (
        ["--mode", "sync", "--rollouts-per-batch", "2"],
        "rollouts_per_batch: sync mode's batch is one rollout of every actor, so it takes only 1",
    ),
    (
        ["--hogwild", "2", "--rollouts-per-batch", "2"],
        "rollouts_per_batch: Hogwild! workers each train on their own rollouts",
    ),
    (["--keep-checkpoints", "0"], "keep_checkpoints: must be >= 1"),
    (["--gamma", "1.5"], "gamma: must be in [0, 1]"),
    (["--norm-obs-min-std", "-1"], "norm_obs_min_std: must be >= 0, got -1"),
    (["--log-every", "-1"], "log_every: must be >= 0"),
    (["--hidden", "64,0"], "hidden: must be a non-empty list of positive layer sizes"),
    (["--algo", "sac"], "algo: sac needs a continuous (Box) action space; CartPole-v1 has 2"),
    (["--algo", "sac", "--env", "Pendulum-v1", "--replay-ratio", "0"], "replay_ratio: must be > 0"),
    (
        ["--algo", "sac", "--env", "Pendulum-v1", "--batch-size", "512", "--buffer-size", "100"],
        "batch_size: 512 is larger than the replay capacity buffer_size 100",
    ),
    (
        [
            "--algo",
            "sac",
            "--env",
            "Pendulum-v1",
            "--ratio-tolerance",
            "3",
            "--envs-per-actor",
            "8",
        ],
        "ratio_tolerance: 3.0 gradient steps is too narrow for inserts of 8 transitions",
    ),
    (
        ["--algo", "sac", "--env", "Pendulum-v1", "--hogwild", "2", "--rollout", "4"],
        "rollout: a Hogwild! worker's SAC loop updates after every batched env step, so rollout "
        "must be 1",
    ),
    (
        ["--algo", "sac", "--env", "HalfCheetah-v5", "--norm-obs"],
        "norm_obs: SAC here has no observation normaliser",
    ),
    (
        ["--algo", "sac", "--env", "Pendulum-v1", "--norm-reward"],
        "norm_reward: SAC replays rewards collected under many policy versions",
    ),
    (["--reward-clip", "-1"], "reward_clip: must be >= 0"),
    (["--wandb-tags", "ok," + "x" * 65], "wandb_tags: must be a list of tags of 1 to 64 char"),
    # rollout 1 (the classic preset's but on CartPole-v1, and sync DQN's only one) left n_step 3
    # silently 1-step
    (
        ["--algo", "dqn", "--env", "Acrobot-v1", "--n-step", "3"],
        "n_step: 3-step returns sum steps within one rollout of 1",
    ),
    (
        ["--algo", "dqn", "--mode", "async", "--rollout", "2", "--n-step", "3"],
        "n_step: 3-step returns sum steps within one rollout of 2",
    ),
    (
        ["--env", "HalfCheetah-v5", "--mode", "async", "--minibatch-size", "4096"],
        "minibatch_size: 4096 is larger than the training batch of 1024 samples",
    ),
    (
        [
            "--env",
            "HalfCheetah-v5",
            "--mode",
            "async",
            "--rollouts-per-batch",
            "2",
            "--minibatch-size",
            "4096",
        ],
        "minibatch_size: 4096 is larger than the training batch of 2048 samples (envs_per_actor "
        "x rollout x rollouts_per_batch)",
    ),
    (
        ["--env", "HalfCheetah-v5", "--rollout", "auto", "--minibatch-size", "4096"],
        "minibatch_size: 4096 is larger than the training batch of 2048 samples (envs_per_actor "
        "x rollout x actors)",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_bad_input_is_one_clear_line(argv, message, capsys, tmp_path):
    before = shm_segments(os.getpid())  # this process's: other test workers make their own
    code = main(["train", "--no-progress", "--run-dir", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("asyncrl: error: ")
    assert message in err
    assert shm_segments(os.getpid()) == before
    assert not mp.active_children()


PER_POLICY_BAD = [
    ("lr: [3.0e-4, abc]", "lr: policy 1: expected a number, got 'abc'"),
    ('norm_adv: [true, "yes"]', "norm_adv: policy 1: expected true or false, got 'yes'"),
    ("lr: [true, 3.0e-4]", "lr: policy 0: expected a number, got True"),
    ("lr: [3.0e-4, null]", "lr: policy 1: expected a number, got None"),
    ("lr_schedule: [constant, cosine]", "lr_schedule: policy 1: 'cosine' is not one of constant"),
    ("epochs: [4, 2.5]", "epochs: policy 1: expected a whole number, got 2.5"),
]


@pytest.mark.parametrize(("listed", "message"), PER_POLICY_BAD)
def test_per_policy_values_of_the_wrong_type_are_one_line_from_the_cli(listed, message, tmp_path):
    """Each policy's value is checked against its setting's type, as the setting's own is:
    ``asyncrl train --config`` exits 2 with one line naming the setting, the policy and what
    it takes, before the run dir exists (no traceback, no run with a string for a flag)."""
    path = tmp_path / "pop.yaml"
    path.write_text(f"policies: 2\nenvs_per_actor: 4\n{listed}\n")
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--config", str(path)]
    cmd += ["--env", "CartPole-v1", "--total-steps", "64", "--run-dir", str(tmp_path / "r")]
    cmd += ["--no-progress", "--no-tensorboard"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    err = out.stderr.strip()
    assert out.returncode == 2, (out.returncode, err[-2000:])
    assert len(err.splitlines()) == 1 and err.startswith(f"asyncrl: error: {message}"), err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("listed", "message"), PER_POLICY_BAD)
def test_per_policy_values_of_the_wrong_type_are_refused_by_the_python_api(
    listed, message, tmp_path
):
    import yaml

    import asyncrl

    name, values = next(iter(yaml.safe_load(listed).items()))
    with pytest.raises(ConfigError) as e:
        asyncrl.train(
            "CartPole-v1", policies=2, envs_per_actor=4, total_steps=64,
            run_dir=str(tmp_path / "r"), progress=False, **{name: values},
        )  # fmt: skip
    assert str(e.value).startswith(message), str(e.value)
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):  # TrainConfig's keywords
        validate(TrainConfig(policies=2, envs_per_actor=4, **{name: values}), "classic")


def test_unknown_choice_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--mode", "fast"])
    assert e.value.code == 2
    assert "invalid choice: 'fast' (choose from 'sync', 'async', 'auto')" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["train", "--actors", "x"], "asyncrl train: error: argument --actors: expected a whole"),
        (["train", "--resume", "r", "--overwrite"], "argument --overwrite: not allowed with"),
        (["eval"], "asyncrl eval: error: the following arguments are required: run_dir"),
        (["trian"], "asyncrl: error: argument command: invalid choice: 'trian'"),
        (["train", "--actros", "2"], "unrecognized arguments: --actros 2 (did you mean --actors?)"),
        # the peers' names for a flag point to asyncrl's
        (
            ["train", "--learning_rate", "1e-3", "--num-envs", "8"],
            "(did you mean --lr, --envs-per-actor?)",
        ),
        (["train", "--enviroment", "x"], "unrecognized arguments: --enviroment x; see"),
        (["tune", "--actros", "2"], "unrecognized arguments: --actros 2; see"),  # tune has --ns
    ],
)
def test_the_parser_refuses_in_one_line_naming_the_flag_and_where_help_is(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err  # no usage block before it
    assert err.rstrip().endswith(f"see asyncrl{' ' + argv[0] if argv[0] != 'trian' else ''} --help")


def test_every_peer_name_points_to_a_setting_and_a_flag_of_train():
    from asyncrl.cli import build_parser
    from asyncrl.settings import FIELDS, PEER_NAMES

    flags = build_parser().commands["train"]._option_string_actions
    for theirs, ours in PEER_NAMES.items():
        assert ours in FIELDS and theirs not in FIELDS
        assert (
            "--" + ours.replace("_", "-") in flags and "--" + theirs.replace("_", "-") not in flags
        )


def test_continuous_action_env_is_accepted_and_bad_yaml_key_rejected(tmp_path, capsys):
    validate(TrainConfig(env="Pendulum-v1"), "classic")
    # normalisation switched off explicitly is what SAC does anyway
    validate(
        TrainConfig(algo="sac", env="Pendulum-v1", norm_obs=False, norm_reward=False), "classic"
    )
    path = tmp_path / "c.yaml"
    path.write_text("rollot: 5\n")
    assert main(["train", "--config", str(path)]) == 2
    assert "unknown setting(s) rollot" in capsys.readouterr().err


def test_validate_runs_before_anything_starts(tmp_path):
    cfg = dataclasses.replace(TrainConfig(), envs_per_actor=-3, run_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="envs_per_actor"):
        train(cfg)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("algo", "env", "others"),
    [("sac", "CartPole-v1", "ppo or dqn"), ("dqn", "Pendulum-v1", "ppo or sac")],
)
def test_an_algorithm_that_cannot_train_the_env_names_those_that_can(
    algo, env, others, capsys, tmp_path
):
    code = main(["train", "--algo", algo, "--env", env, "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"asyncrl: error: algo: {algo} needs a ")
    assert err.endswith(f"(use --algo {others})")


def test_python_dash_m_asyncrl_is_the_command_line(tmp_path):
    """``python -m asyncrl`` runs the CLI: the same one-line refusal and exit code as the script."""
    cmd = [sys.executable, "-m", "asyncrl", "train", "--env", "CartPole-v1", "--envs-per-actor"]
    cmd += ["0", "--run-dir", str(tmp_path / "r")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    err = out.stderr.strip()
    assert out.returncode == 2 and len(err.splitlines()) == 1, (out.returncode, err[-2000:])
    assert err.startswith("asyncrl: error: envs_per_actor"), err
    assert not (tmp_path / "r").exists()


def test_every_backend_the_settings_allow_is_registered_and_no_other():
    """--backend's choices and the backends' registry name the same backends, each a class."""
    from asyncrl.config import BACKENDS as CHOICES
    from asyncrl.runtime.backends import BACKENDS, backend_class

    assert sorted(BACKENDS) == sorted(CHOICES)
    for name in CHOICES:
        assert callable(backend_class(name).check_settings), name
