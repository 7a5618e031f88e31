"""Presets fill only what was not set, say so in one line, and are saved resolved."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import yaml

from asyncrl.cli import build_parser, main
from asyncrl.config import ConfigError, learner_process_config, learner_threads
from asyncrl.envs import env_family
from asyncrl.settings import (
    PRESET_FIELDS,
    PRESETS,
    TUNED,
    TrainConfig,
    from_dict,
    load_run_config,
    preset_line,
    preset_values,
    resolve,
    validate,
)

MUJOCO_PPO_LINE = (
    "asyncrl: preset mujoco (auto: HalfCheetah-v5) for ppo: gamma 0.99, gae_lambda 0.95, "
    "lr 0.0003, lr_schedule linear, epochs 10, minibatch_size 64, rollout 128, hidden 64,64, "
    "norm_obs on, norm_reward on, norm_obs_keep_sparse on, value_clip 0.2, mode sync"
)


@pytest.mark.parametrize(
    ("env", "family"),
    [
        ("CartPole-v1", "classic"),
        ("Pendulum-v1", "classic"),
        ("MountainCarContinuous-v0", "classic"),
        ("HalfCheetah-v5", "mujoco"),
        ("Hopper-v5", "mujoco"),
        ("Walker2d-v5", "mujoco"),
        ("fake_envs:MultiDiscreteActions-v0", "generic"),  # the suite's own: no family
    ],
)
def test_auto_chooses_by_the_package_that_implements_the_env(env, family):
    assert env_family(env) == family


@pytest.mark.skipif(
    importlib.util.find_spec("pybullet_envs_gymnasium") is None, reason="no pybullet extra"
)
def test_pybullet_locomotion_is_mujoco_family():
    assert env_family("HumanoidBulletEnv-v0") == "mujoco"
    assert env_family("HopperBulletEnv-v0") == "mujoco"


def test_unknown_env_is_a_config_error_naming_env():
    with pytest.raises(ConfigError, match="env: 'NoSuchEnv-v9' is not a registered"):
        env_family("NoSuchEnv-v9")


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_every_preset_resolves_every_governed_setting_to_a_valid_config(preset, algo):
    assert set(preset_values(preset, algo)) == set(PRESET_FIELDS)
    env = "Pendulum-v1" if preset == "classic" else "HalfCheetah-v5"
    cfg = resolve(TrainConfig(algo=algo, env=env, preset=preset))
    assert all(getattr(cfg, name) is not None for name in PRESET_FIELDS)
    assert cfg.preset == preset
    validate(cfg)
    assert resolve(cfg) == cfg  # resolved is a fixed point: a saved run resolves to itself


def test_classic_has_cartpoles_values_with_several_minibatches_per_async_batch():
    cfg = resolve(TrainConfig(), env_family("CartPole-v1"))
    assert cfg.preset == "classic"
    assert (cfg.gamma, cfg.gae_lambda, cfg.lr, cfg.epochs, cfg.minibatch_size) == (
        0.98,
        0.8,
        5e-4,
        10,
        64,
    )
    assert cfg.envs_per_actor * cfg.rollout // cfg.minibatch_size == 4  # per async batch
    assert (cfg.rollout, cfg.hidden, cfg.norm_obs, cfg.norm_reward) == (32, [64, 64], False, False)


def test_mujoco_ppo_is_cleanrls_recipe_with_a_2048_sample_sync_batch():
    cfg = resolve(TrainConfig(env="Hopper-v5"), env_family("Hopper-v5"))
    assert (cfg.gamma, cfg.gae_lambda, cfg.lr, cfg.lr_schedule) == (0.99, 0.95, 3e-4, "linear")
    assert (cfg.epochs, cfg.minibatch_size, cfg.norm_obs, cfg.norm_reward) == (10, 64, True, True)
    assert (cfg.clip_coef, cfg.value_clip, cfg.ent_coef) == (0.2, 0.2, 0.0)  # clip_vloss
    assert resolve(TrainConfig(env="CartPole-v1"), "classic").value_clip == 0.0
    assert cfg.actors * cfg.envs_per_actor * cfg.rollout == 2048
    assert cfg.mode == "sync"  # a batch is every actor's rollout
    assert cfg.norm_obs_keep_sparse  # Ant-v5's contact forces keep their scale
    assert not resolve(TrainConfig(env="LunarLander-v3"), "box2d").norm_obs_keep_sparse


def test_only_mujoco_ppo_runs_sync_unless_the_mode_is_given():
    """The mujoco family's PPO preset is sync (async's lag cost HalfCheetah and Ant return in the
    defaults table); every other family and algorithm leaves the run's async; --mode wins."""
    families = {"CartPole-v1": "classic", "Acrobot-v1": "classic", "Hopper-v5": "mujoco"}
    for env, family in families.items():
        expected = "sync" if family == "mujoco" else "async"
        assert resolve(TrainConfig(env=env), family).mode == expected, env
    assert resolve(TrainConfig(env="Hopper-v5", algo="sac"), "mujoco").mode == "async"
    for preset in ("generic", "box2d", "atari", "pixels"):
        assert resolve(TrainConfig(env="Hopper-v5", preset=preset)).mode == "async", preset
    given = TrainConfig(env="Hopper-v5", mode="async")
    cfg = resolve(given, "mujoco")
    assert cfg.mode == "async" and "mode" not in preset_line(given, cfg)
    unset = TrainConfig(env="Hopper-v5")
    assert "mode sync" in preset_line(unset, resolve(unset, "mujoco"))
    args = build_parser().parse_args(["train", "--mode", "auto"])  # auto: the preset's
    assert args.mode is None and from_dict({"mode": None}).mode is None


def test_compile_is_on_by_default_only_where_it_pays():
    """Unset, --compile is derived: on for MLP policies in runs of >= COMPILE_MIN_STEPS
    gradient steps (a first compilation pays back there), off in shorter runs and for the CNN;
    given, it is kept; either way a resolved config resolves to itself."""
    from asyncrl.algos.ppo.config import COMPILE_MIN_STEPS, gradient_steps
    from asyncrl.settings import for_env, underive

    cartpole = resolve(TrainConfig(), "classic")  # 150,000 steps: 23,400 gradient steps
    assert gradient_steps(cartpole) < COMPILE_MIN_STEPS and cartpole.compile is False
    cheetah = resolve(TrainConfig(env="HalfCheetah-v5"), "mujoco")  # 1M steps
    assert gradient_steps(cheetah) >= COMPILE_MIN_STEPS and cheetah.compile is True
    assert resolve(cheetah) == cheetah and underive(cheetah).compile is None  # re-derived
    given = TrainConfig(compile=True)
    assert resolve(given, "classic").compile is True
    assert resolve(TrainConfig(env="HalfCheetah-v5", compile=False), "mujoco").compile is False
    breakout = TrainConfig(env="ALE/Breakout-v5")
    spec = SimpleNamespace(obs_shape=(4, 84, 84), obs_dtype="uint8")
    cfg, _ = for_env(resolve(breakout, "atari"), spec, breakout)
    assert cfg.encoder == "cnn" and cfg.compile is False
    forced = TrainConfig(env="ALE/Breakout-v5", compile=True)
    assert for_env(resolve(forced, "atari"), spec, forced)[0].compile is True
    flat = SimpleNamespace(obs_shape=(17,), obs_dtype="float32")
    gpu = TrainConfig(env="HalfCheetah-v5", device="auto")  # measured on the CPU only
    assert for_env(resolve(gpu, "mujoco"), flat, gpu)[0].compile is False
    assert for_env(cheetah, flat, TrainConfig(env="HalfCheetah-v5"))[0].compile is True
    assert resolve(TrainConfig(algo="sac", env="Pendulum-v1"), "classic").compile is None


def test_compile_is_derived_for_recurrent_steps_whose_sequences_it_can_unroll():
    """A recurrent step compiles with its sequences unrolled: derived on as for MLP policies
    while --recurrence <= COMPILE_MAX_RECURRENCE, off above it; given above it, refused; given
    with the cnn encoder, refused (only the step after the mlp encoder compiles)."""
    from asyncrl.algos.ppo.config import COMPILE_MAX_RECURRENCE, gradient_steps, recurrence
    from asyncrl.settings import for_env

    # a minibatch of whole 128-step sequences for both (a preset's 64 is derived up to them)
    long = dict(env="HalfCheetah-v5", recurrent="lstm", total_steps=4_000_000, minibatch_size=128)
    short_seq = resolve(TrainConfig(**long, recurrence=32), "mujoco")
    assert recurrence(short_seq) <= COMPILE_MAX_RECURRENCE and short_seq.compile is True
    long_seq = resolve(TrainConfig(**long, recurrence=128), "mujoco")
    assert gradient_steps(long_seq) == gradient_steps(short_seq) and long_seq.compile is False
    with pytest.raises(ConfigError, match="compile: a recurrent step is compiled for"):
        validate(TrainConfig(**long, recurrence=128, compile=True), "mujoco")
    pong = TrainConfig(env="ALE/Pong-v5", recurrent="lstm", compile=True)
    image = SimpleNamespace(obs_shape=(1, 84, 84), obs_dtype="uint8")
    with pytest.raises(ConfigError, match="compile: a recurrent step is compiled after the mlp"):
        for_env(resolve(pong, "atari"), image, pong)


def test_the_atari_learner_takes_one_thread_per_cpu_the_others_one(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})  # 3 CPUs allowed
    atari = resolve(TrainConfig(env="ALE/Breakout-v5"), "atari")
    assert atari.threads_learner == 0 and learner_threads(atari) == 3
    assert "threads_learner 0 (one per CPU: 3)" in preset_line(TrainConfig(), atari)
    given = resolve(TrainConfig(env="ALE/Breakout-v5", threads_learner=1), "atari")
    assert learner_threads(given) == 1  # a flag wins
    for family in ("classic", "mujoco"):
        assert learner_threads(resolve(TrainConfig(), family)) == 1
    # Hogwild! workers share the CPUs, at least one thread each
    assert learner_threads(atari, learners=2) == 1 and learner_threads(atari, learners=5) == 1
    with pytest.raises(ConfigError, match="threads_learner: must be >= 0"):
        validate(resolve(TrainConfig(threads_learner=-1), "classic"))


def test_a_populations_learner_processes_share_the_cpus_under_threads_learner_0(monkeypatch):
    """P learner processes train at once: with threads_learner 0 each takes its share of the
    CPUs (at least one), not every CPU; a number given stays as it is."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})  # 4 CPUs allowed
    for policies, share in ((1, 4), (2, 2), (3, 1), (8, 1)):
        atari = resolve(TrainConfig(env="ALE/Breakout-v5", policies=policies), "atari")
        assert atari.threads_learner == 0
        own = learner_process_config(atari)
        assert own.threads_learner == share and learner_threads(own) == share, policies
    given = resolve(TrainConfig(env="ALE/Breakout-v5", policies=2, threads_learner=3), "atari")
    assert learner_process_config(given) == given


@pytest.mark.parametrize(
    ("env", "family", "algo", "steps"),
    [
        ("CartPole-v1", "classic", "ppo", 150_000),
        ("Pendulum-v1", "classic", "sac", 150_000),
        ("Hopper-v5", "mujoco", "ppo", 1_000_000),  # the references' MuJoCo figures: at 1M
        ("HalfCheetah-v5", "mujoco", "sac", 1_000_000),
        ("ALE/Breakout-v5", "atari", "ppo", 10_000_000),  # CleanRL's ppo_atari: 10M agent steps
        ("Acrobot-v1", "classic", "dqn", 500_000),  # CleanRL's dqn.py
        ("CartPole-v1", "classic", "dqn", 100_000),  # tuned on it: where it solves it
        ("LunarLander-v3", "box2d", "dqn", 100_000),  # tuned on it: RL Zoo's LunarLander budget
    ],
)
def test_the_budget_is_the_one_the_familys_references_report_at(env, family, algo, steps):
    cfg = resolve(TrainConfig(env=env, algo=algo), family)
    assert cfg.total_steps == steps
    assert f"total_steps {steps}" in preset_line(TrainConfig(env=env, algo=algo), cfg)
    given = resolve(TrainConfig(env=env, algo=algo, total_steps=4096), family)
    assert given.total_steps == 4096 and "total_steps" not in preset_line(
        TrainConfig(env=env, algo=algo, total_steps=4096), given
    )


def test_train_with_no_flag_but_a_mujoco_env_is_the_1m_step_run(tmp_path, monkeypatch, runs_seen):
    """`asyncrl train --env Hopper-v5`, nothing else: the run the MuJoCo targets describe."""
    monkeypatch.chdir(tmp_path)  # the default run directory is made under runs/ here
    assert main(["train", "--env", "Hopper-v5"]) == 0
    cfg, _, _ = runs_seen[0]
    assert (cfg.preset, cfg.total_steps) == ("mujoco", 1_000_000)
    saved = load_run_config(cfg.run_dir)
    assert saved.total_steps == 1_000_000


def test_the_mujoco_preset_marks_ants_contact_forces_sparse_and_no_hopper_dimension(tmp_path):
    """Ant-v5's 78 contact forces (observation dimensions 27-104, exactly 0 on most steps) are
    the dimensions its first update marks sparse, and divided by at least 1; none of Hopper's."""
    import torch

    from asyncrl.policy import load

    for env, marked in (("Ant-v5", list(range(27, 105))), ("Hopper-v5", [])):
        run = tmp_path / env
        argv = ["train", "--env", env, "--total-steps", "2048", "--run-dir", str(run)]
        assert main([*argv, "--no-progress"]) == 0
        norm = load(run).module.obs_norm
        assert norm.keep_sparse and torch.nonzero(norm.sparse).flatten().tolist() == marked
        assert bool((norm.scale()[marked] >= 1).all())


@pytest.mark.parametrize(("env", "warmup"), [("Pendulum-v1", 100), ("HalfCheetah-v5", 5000)])
def test_sac_has_its_own_defaults(env, warmup):
    cfg = resolve(TrainConfig(algo="sac", env=env), env_family(env))
    assert cfg.gamma == 0.99  # not PPO's classic 0.98
    assert (cfg.rollout, cfg.hidden, cfg.learning_starts) == (1, [256, 256], warmup)
    assert (cfg.norm_obs, cfg.norm_reward) == (False, False)
    line = preset_line(TrainConfig(algo="sac", env=env), cfg)
    assert line.startswith(f"asyncrl: preset {cfg.preset} (auto: {env}) for sac: gamma 0.99,")
    assert "gae_lambda" not in line and "lr " not in line  # settings SAC does not read


def test_dqn_on_cartpole_takes_the_values_tuned_on_it_and_other_classic_envs_cleanrls():
    from asyncrl.algos.dqn.config import TUNED

    env, tuned = TUNED["classic"]
    given = TrainConfig(algo="dqn", env=env)
    cfg = resolve(given, "classic")
    assert {name: getattr(cfg, name) for name in tuned} == tuned
    assert (cfg.mode, cfg.actors, cfg.rollout, cfg.n_step, cfg.td_loss) == ("async", 2, 4, 3, "mse")
    line = preset_line(given, cfg)
    assert line.startswith(
        "asyncrl: preset classic (auto: CartPole-v1) for dqn: gamma 0.99, td_loss mse; "
        "tuned on CartPole-v1: lr 0.0023, batch_size 64,"
    )
    assert "total_steps 100000" in line and "n_step 3" in line
    acrobot = resolve(TrainConfig(algo="dqn", env="Acrobot-v1"), "classic")
    assert (acrobot.lr, acrobot.hidden, acrobot.rollout, acrobot.n_step) == (
        2.5e-4,
        [120, 84],
        1,
        1,
    )
    assert (acrobot.envs_per_actor, acrobot.total_steps) == (8, 500_000)


@pytest.mark.parametrize("switch", [dict(mode="sync"), dict(hogwild=2)])
def test_dqns_tuned_rollout_and_n_step_give_way_to_a_loop_of_single_steps(switch):
    """Sync DQN (here 2 actors, so no longer rollout computes the same) and a Hogwild! worker
    step with rollouts of 1: CartPole's tuned rollout of 4 and 3-step returns, left unset,
    derive to 1 there; only values given can conflict."""
    given = TrainConfig(algo="dqn", env="CartPole-v1", **switch)
    cfg = resolve(given, "classic")
    assert (cfg.rollout, cfg.n_step, cfg.lr) == (1, 1, 2.3e-3)
    validate(cfg)
    assert preset_line(given, cfg).endswith(
        "; derived to agree with the others: rollout 1, n_step 1"
    )
    shorter = resolve(TrainConfig(algo="dqn", env="CartPole-v1", rollout=2), "classic")
    assert (shorter.rollout, shorter.n_step) == (2, 2)  # a transition sums one rollout's steps
    longer = TrainConfig(algo="dqn", env="CartPole-v1", rollout=4, **switch)
    if "hogwild" in switch:
        with pytest.raises(ConfigError, match="rollout: a Hogwild! worker's DQN loop updates"):
            validate(longer, "classic")
    else:  # sync: the gradient steps due after each rollout of 4, as the user asked
        validate(longer, "classic")


def test_sync_dqn_with_one_env_derives_the_rollout_that_computes_what_single_steps_do():
    """CleanRL's dqn.py settings (1 env, a gradient step per 10 env steps, learning from 10k,
    10k + 50k steps): every update falls due at a 10th step, so sync rollouts of 10 compute
    what rollouts of 1 do (tests/runtime/test_dqn_pipeline.py checks the bits); where the
    updates do not fall at a rollout's end, the rollout stays 1. Async with 1-step returns
    takes it as its least rollout: one hand-over per gradient step."""
    cleanrl = dict(
        algo="dqn", env="CartPole-v1", mode="sync", actors=1, envs_per_actor=1,
        replay_ratio=0.1, learning_starts=10_000, total_steps=60_000,
    )  # fmt: skip
    cfg = resolve(TrainConfig(**cleanrl), "classic")
    assert (cfg.rollout, cfg.n_step) == (10, 1)  # the tuned n_step 3 would differ: 1
    validate(cfg)
    for other, rollout in (
        (dict(envs_per_actor=2), 5),  # 2 envs: a gradient step per 5 batched steps
        (dict(learning_starts=10_004), 2),  # the first update at step 10,014
        (dict(total_steps=60_005), 5),  # the last rollout would overrun the budget
        (dict(replay_ratio=0.3), 1),  # updates at steps 3, 6, 10, ...: no common period
        (dict(actors=2), 1),  # two actors' rollouts enter the replay in another order
        (dict(mode="async"), 4),  # async: the tuned value (its tuned 3-step returns)
        (dict(mode="async", n_step=1), 10),  # 1-step returns: a hand-over per gradient step
        (dict(mode="async", n_step=1, replay_ratio=0.5), 4),  # at least the tuned value
    ):
        assert resolve(TrainConfig(**{**cleanrl, **other}), "classic").rollout == rollout, other
    given = resolve(TrainConfig(**cleanrl, rollout=1), "classic")
    assert given.rollout == 1  # a rollout given is kept
    # every value the preset fills given but the rollout: the line names what was derived only
    names = {*PRESETS["classic"]["dqn"], *TUNED["classic"]["dqn"][1]} - {"rollout", *cleanrl}
    every = TrainConfig(**cleanrl, **{n: getattr(cfg, n) for n in names})
    assert preset_line(every, resolve(every, "classic")) == (
        "asyncrl: preset classic (auto: CartPole-v1) for dqn: derived to agree with the others: "
        "rollout 10"
    )


def test_a_setting_given_wins_even_when_it_equals_another_presets_value():
    given = TrainConfig(env="HalfCheetah-v5", gamma=0.98, gae_lambda=0.8, norm_reward=False)
    cfg = resolve(given, "mujoco")
    assert (cfg.gamma, cfg.gae_lambda, cfg.norm_reward) == (0.98, 0.8, False)
    assert (cfg.lr, cfg.norm_obs) == (3e-4, True)  # the rest from the preset
    line = preset_line(given, cfg)
    assert "gamma" not in line and "gae_lambda" not in line and "norm_reward" not in line
    # and a value equal to the preset's own, given, is not reported as filled either
    assert (
        preset_line(TrainConfig(env="HalfCheetah-v5", **preset_values("mujoco", "ppo")), cfg)
        is None
    )


def test_explicit_preset_needs_no_env_and_auto_needs_its_family():
    assert resolve(TrainConfig(env="HalfCheetah-v5", preset="classic")).gamma == 0.98
    with pytest.raises(ValueError, match="env_family"):
        resolve(TrainConfig())


def test_bad_preset_in_yaml_is_one_line_naming_the_field(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("preset: robots\n")
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "asyncrl: error: preset: 'robots' is not one of auto, generic, classic, box2d, mujoco, "
        "atari, pixels, game"
    )
    assert not (tmp_path / "r").exists()


def test_auto_on_the_command_line_and_null_in_yaml_leave_a_setting_to_the_preset(tmp_path):
    args = build_parser().parse_args(["train", "--gamma", "auto", "--hidden", "auto"])
    assert args.gamma is None and args.hidden is None
    args = build_parser().parse_args(["train", "--gamma", "0.9", "--hidden", "32,32"])
    assert args.gamma == 0.9 and args.hidden == [32, 32]
    assert from_dict({"gamma": None, "rollout": 64.0}).gamma is None
    assert from_dict({"rollout": 64.0}).rollout == 64


def _train(tmp_path, *argv: str, run: str = "run") -> int:
    return main(
        [
            "train",
            "--backend",
            "inline",
            "--actors",
            "1",
            "--envs-per-actor",
            "2",
            "--total-steps",
            "256",
            "--checkpoint-every",
            "0",
            "--no-progress",
            "--no-tensorboard",
            "--run-dir",
            str(tmp_path / run),
            *argv,
        ]
    )


def test_the_preset_is_printed_in_one_line_and_saved_resolved(tmp_path, capsys):
    assert _train(tmp_path, "--env", "HalfCheetah-v5") == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("asyncrl: preset")]
    assert lines == [MUJOCO_PPO_LINE]
    saved = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    assert saved["preset"] == "mujoco"
    for name, value in preset_values("mujoco", "ppo").items():
        if name not in ("total_steps", "envs_per_actor", "actors"):  # given: --total-steps 256, ...
            assert saved[name] == value, name
    assert saved["total_steps"] == 256
    # every setting filled; unset policies_to_train is a value: every policy trains
    assert [name for name, value in saved.items() if value is None] == ["policies_to_train"]


def test_flags_and_yaml_keys_given_win_and_are_not_reported(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("gae_lambda: 0.8\nrollout: 64\n")  # classic's lambda, given on purpose
    code = _train(
        tmp_path, "--env", "HalfCheetah-v5", "--config", str(path), "--gamma", "0.98",
        "--no-norm-reward",
    )  # fmt: skip
    assert code == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("asyncrl: preset")]
    assert line == [
        "asyncrl: preset mujoco (auto: HalfCheetah-v5) for ppo: lr 0.0003, lr_schedule linear, "
        "epochs 10, minibatch_size 64, hidden 64,64, norm_obs on, norm_obs_keep_sparse on, "
        "value_clip 0.2, mode sync"
    ]
    saved = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    assert (saved["gamma"], saved["gae_lambda"], saved["rollout"]) == (0.98, 0.8, 64)
    assert (saved["norm_reward"], saved["norm_obs"]) == (False, True)


def test_a_resumed_run_keeps_its_resolved_settings(tmp_path, capsys):
    assert _train(tmp_path, "--env", "HalfCheetah-v5") == 0
    before = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    capsys.readouterr()
    code = main(
        ["train", "--resume", str(tmp_path / "run"), "--total-steps", "512", "--no-progress"]
    )
    assert code == 0
    assert "asyncrl: preset" not in capsys.readouterr().out  # nothing left to fill
    after = yaml.safe_load((tmp_path / "run/config.yaml").read_text())
    assert {k: v for k, v in after.items() if k not in ("total_steps", "progress")} == {
        k: v for k, v in before.items() if k not in ("total_steps", "progress")
    }


def test_a_run_saved_before_presets_resumes_as_it_ran(tmp_path):
    """A config.yaml from before norm_reward and norm_obs_min_std existed: resumed, it must
    not gain the first from the mujoco preset, and runs the plain normaliser it ran."""
    run = tmp_path / "old"
    run.mkdir()
    old = resolve(TrainConfig(env="HalfCheetah-v5", norm_obs=True), "mujoco").to_dict()
    del old["norm_reward"], old["preset"], old["reward_clip"], old["norm_obs_min_std"]
    del old["norm_obs_keep_sparse"]
    (run / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = resolve(load_run_config(run), env_family("HalfCheetah-v5"))
    assert cfg.norm_reward is False and cfg.gamma == old["gamma"]
    assert cfg.norm_obs_min_std == 0.0  # its normaliser scaled every dimension
    assert cfg.norm_obs_keep_sparse is False
