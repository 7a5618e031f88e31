"""Every switch works on its own (#54): for one env of each family, every algorithm whose
actions fit, and each value of --recurrent, --policies, --mode, --hogwild and --vectorizer,
the settings resolve and validate with no other flag, and the only refusals are the
genuinely unsupported combinations listed in REFUSED (also on docs/guides/presets.md); then
short runs of a covering subset each complete a learner iteration."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from asyncrl.config import ConfigError
from asyncrl.envs import env_family
from asyncrl.runtime.trainer import prepare, train
from asyncrl.settings import TrainConfig, validate

# family: (env, discrete actions, the package that makes it)
FAMILIES = {
    "classic-discrete": ("CartPole-v1", True, None),
    "classic-continuous": ("Pendulum-v1", False, None),
    "box2d": ("LunarLander-v3", True, "Box2D"),
    "mujoco": ("Hopper-v5", False, "mujoco"),
    "pybullet": ("HumanoidBulletEnv-v0", False, "pybullet_envs_gymnasium"),
    "atari": ("ALE/Breakout-v5", True, "ale_py"),
    "generic": ("fake_envs:Countdown-v0", True, None),  # registered by the tests' module
}
# pattern of a refusal -> why the combination is genuinely unsupported (docs: Guides, presets)
REFUSED = {
    r"recurrent: (policy \d+: )?a population \(--policies \d+\) of recurrent policies is not "
    r"supported yet": "a population's learners do not keep per-policy recurrent states yet",
    r"policies: Hogwild! workers train one shared network; a population needs the "
    r"actor-learner pipeline": "Hogwild! trains one network, a population several",
    r"vectorizer: envpool provides MuJoCo v5 and Atari v5 ids; \S+ is not one of them": (
        "EnvPool has no such env"
    ),
}
ROOT = Path(__file__).resolve().parents[1]


def _needs(package: str | None) -> None:
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed, so this family's env cannot be made")
    if package == "pybullet_envs_gymnasium":
        import pybullet_envs_gymnasium  # noqa: F401  (registers the Bullet ids)


def combinations(env: str, discrete: bool):
    """The settings of every combination of switches for ``env``, nothing else given."""
    for algo in ("ppo", "dqn" if discrete else "sac"):
        recurrents = ("none", "lstm", "gru") if algo == "ppo" else ("none",)
        for recurrent, policies, mode, hogwild, vectorizer in itertools.product(
            recurrents, (1, 2), ("sync", "async"), (0, 2), ("gymnasium", "envpool")
        ):
            kw = dict(env=env, algo=algo, policies=policies, mode=mode, hogwild=hogwild)
            kw["vectorizer"] = vectorizer
            if recurrent != "none":
                kw["recurrent"] = recurrent
            yield kw


def _listed_refusal(error: ConfigError, kw: dict) -> None:
    text = str(error)
    assert "\n" not in text, f"{kw}: a refusal in more than one line: {text!r}"
    assert any(re.match(p, text) for p in REFUSED), f"{kw}: refused, and not listed: {text}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_combination_of_switches_resolves_and_validates(family):
    """No env is made: the settings alone (the family comes from the env's registration)."""
    env, discrete, package = FAMILIES[family]
    if package != "Box2D":  # Box2D's ids are registered without it
        _needs(package)
    refused = 0
    for kw in combinations(env, discrete):
        try:
            validate(TrainConfig(**kw), env_family(env))
        except ConfigError as e:
            _listed_refusal(e, kw)
            refused += 1
    assert refused < len(list(combinations(env, discrete)))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_combination_of_switches_is_ready_to_start_on_its_env(family):
    """As ``asyncrl train`` checks before anything starts: the env's spec read, the settings
    fitted to it (replay memory, encoder, compile), the backend checked."""
    env, discrete, package = FAMILIES[family]
    _needs(package)
    for kw in combinations(env, discrete):
        try:
            prepare(TrainConfig(**kw))
        except ConfigError as e:
            _listed_refusal(e, kw)


def test_refusals_are_listed_on_the_presets_page():
    page = (ROOT / "docs" / "guides" / "presets.md").read_text()
    for why in REFUSED.values():
        assert why in page


# A covering subset: every family x algorithm once, every value of each switch at least once.
# Each shrinks the budget to a batch or two by flags (the budget and the batch's size only).
SHORT = dict(progress=False, tensorboard=False, checkpoint_every=0, backend="inline")
SLOW = pytest.mark.slow  # > 20 s on a loaded 2-core machine: Hogwild!'s processes, Atari's CNN
RUNS = [
    ("classic-discrete", dict(algo="ppo", mode="sync"), ()),
    ("classic-discrete", dict(algo="dqn", policies=2, mode="async"), ()),
    ("classic-continuous", dict(algo="ppo", recurrent="lstm", hogwild=2), SLOW),
    ("classic-continuous", dict(algo="sac", mode="sync"), ()),
    ("box2d", dict(algo="ppo", recurrent="gru"), ()),
    ("box2d", dict(algo="dqn", hogwild=2), SLOW),
    ("mujoco", dict(algo="ppo", recurrent="gru", vectorizer="envpool"), ()),
    ("mujoco", dict(algo="sac", policies=2, mode="async", vectorizer="envpool"), ()),
    ("pybullet", dict(algo="ppo", policies=2, mode="async"), ()),
    ("pybullet", dict(algo="sac", hogwild=2), SLOW),
    ("atari", dict(algo="ppo", recurrent="lstm", mode="async", vectorizer="envpool"), SLOW),
    ("atari", dict(algo="dqn", mode="sync"), SLOW),
    ("generic", dict(algo="ppo", policies=2, mode="sync"), ()),
    ("generic", dict(algo="dqn", hogwild=2), SLOW),
]


def _budget(kw: dict) -> dict:
    """Flags that make a run of ``kw`` a few seconds: a batch of 2 envs x 16 steps (PPO) or
    120 env steps with learning from the 40th (off-policy), a small replay."""
    if kw["algo"] == "ppo":
        return dict(actors=1, envs_per_actor=2, rollout=16, total_steps=64)
    return dict(total_steps=120, learning_starts=40, buffer_size=500, envs_per_actor=2)


@pytest.mark.parametrize(
    ("family", "switches"),
    [pytest.param(f, kw, marks=m, id=f"{f}-{kw['algo']}-{i}") for i, (f, kw, m) in enumerate(RUNS)],
)
def test_a_short_run_of_each_covering_combination_completes_a_learner_iteration(
    family, switches, tmp_path
):
    env, _, package = FAMILIES[family]
    _needs(package)
    cfg = TrainConfig(env=env, **switches, **_budget(switches), **SHORT, run_dir=str(tmp_path))
    summary = train(cfg)
    assert summary["ended"] == "budget"
    assert summary["iterations"] >= 1


def test_a_setting_left_unset_is_derived_to_agree_and_the_preset_line_says_so():
    from asyncrl.settings import preset_line, resolve

    # box2d: a family whose preset --recurrent leaves as it is (generic's and classic's below)
    given = TrainConfig(env="LunarLander-v3", recurrent="lstm")
    cfg = resolve(given, "box2d")
    assert (cfg.rollout, cfg.recurrence, cfg.minibatch_size) == (128, 0, 128)  # preset: 64
    assert preset_line(given, cfg).endswith(
        "; derived to agree with the others: minibatch_size 128"
    )
    # a minibatch given: sequences that fit it; a --recurrence given: a rollout of whole chunks
    assert (
        resolve(
            TrainConfig(env="LunarLander-v3", recurrent="gru", minibatch_size=64), "box2d"
        ).recurrence
        == 64
    )
    chunked = resolve(TrainConfig(env="LunarLander-v3", recurrent="gru", recurrence=48), "box2d")
    assert (chunked.rollout, chunked.minibatch_size) == (144, 96)
    # a batch shrunk by flags: the minibatch fits it; a population of SAC: an env per policy
    small = resolve(TrainConfig(env="CartPole-v1", envs_per_actor=2, rollout=16), "classic")
    assert small.minibatch_size == 32
    assert (
        resolve(TrainConfig(env="Pendulum-v1", algo="sac", policies=3), "classic").envs_per_actor
        == 3
    )


@pytest.mark.parametrize(
    ("given", "names"),
    [
        (dict(recurrent="lstm", rollout=128, recurrence=48), ("recurrence", "rollout")),
        (dict(recurrent="gru", recurrence=32, minibatch_size=48), ("minibatch_size", "recurrence")),
        (dict(recurrent="gru", rollout=128, minibatch_size=64), ("minibatch_size", "the rollout")),
        (
            dict(envs_per_actor=2, rollout=16, minibatch_size=64),
            ("minibatch_size", "envs_per_actor"),
        ),
    ],
)
def test_only_settings_given_together_conflict_and_the_refusal_names_them(given, names):
    with pytest.raises(ConfigError) as refused:
        validate(TrainConfig(env="Pendulum-v1", **given), "classic")
    text = str(refused.value)
    assert "\n" not in text and text.startswith(names[0]) and all(n in text for n in names)


def test_settings_given_stay_as_given():
    """What was valid before resolves as before: nothing given is changed."""
    from asyncrl.settings import resolve

    kw = dict(env="Hopper-v5", recurrent="lstm", rollout=64, minibatch_size=128, envs_per_actor=4)
    cfg = resolve(TrainConfig(**kw), "mujoco")
    assert {k: getattr(cfg, k) for k in kw} == kw and cfg.recurrence == 0
