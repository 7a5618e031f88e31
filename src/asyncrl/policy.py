"""A trained policy outside training: load it from a run directory, act with it, evaluate it,
record a video of it.

:class:`Policy` is the one way asyncrl turns a checkpoint into actions: ``asyncrl eval``, the
Python API's :func:`load` and the evaluations during training (``--eval-every``) all act
through it, so they agree action for action on the same observations.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asyncrl.config import ConfigError
from asyncrl.core import Algorithm
from asyncrl.envs import EnvSpec, check_env, make_env
from asyncrl.nets import FlatParams
from asyncrl.rundir import (
    load_best_checkpoint,
    load_checkpoint,
    load_checkpoint_at,
    policy_dir,
    policy_of,
)
from asyncrl.settings import TrainConfig, load_run_config, plugin, policy_config

CHECKPOINTS = ("latest", "best")
RENDER_TIMEOUT = 30.0  # seconds a MuJoCo env's first off-screen frame may take to draw


class VideoError(ConfigError):
    """The env cannot render off-screen here; the message says in one line what it needs."""


@dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of evaluated episodes, in the order they were run."""

    returns: list[float]
    lengths: list[int]

    @property
    def episodes(self) -> int:
        """Episodes run."""
        return len(self.returns)

    @property
    def mean_return(self) -> float:
        """Mean episode return (NaN without episodes)."""
        return float(np.mean(self.returns)) if self.returns else math.nan

    @property
    def std_return(self) -> float:
        """Standard deviation of the episode returns."""
        return float(np.std(self.returns)) if self.returns else math.nan

    @property
    def mean_length(self) -> float:
        """Mean episode length in env steps."""
        return float(np.mean(self.lengths)) if self.lengths else math.nan

    @property
    def std_length(self) -> float:
        """Standard deviation of the episode lengths."""
        return float(np.std(self.lengths)) if self.lengths else math.nan

    def to_dict(self) -> dict[str, Any]:
        """The figures and the episodes as plain JSON-ready data."""
        return {
            "episodes": self.episodes,
            "mean_return": self.mean_return,
            "std_return": self.std_return,
            "mean_length": self.mean_length,
            "std_length": self.std_length,
            "returns": list(self.returns),
            "lengths": list(self.lengths),
        }


class Policy:
    """A policy of a run, on the CPU, ready to act: PPO's actor-critic or SAC's actor, with the
    observation normalisation it was trained with (its statistics are part of the saved policy).

    Made by :func:`load` (or ``TrainResult.load``); ``config`` is the run's resolved config,
    ``spec`` its env's shapes, ``env_steps`` the training env steps the weights had seen, and
    ``evaluation`` the evaluation during training that made a best checkpoint best (else None).
    """

    def __init__(self, module: torch.nn.Module, config: TrainConfig, spec: EnvSpec, seed: int = 0):
        self.module = module.eval().requires_grad_(False)
        self.config, self.spec = config, spec
        self.env_steps: int | None = None
        self.evaluation: dict[str, Any] | None = None
        self.index: int | None = None  # which policy of a population run
        self.generator = torch.Generator().manual_seed(seed)  # stochastic actions only
        self._flat: FlatParams | None = None
        self.pool: dict[str, Any] | None = None  # a pool run's snapshots (its checkpoint's)

    @classmethod
    def build(cls, config: TrainConfig, spec: EnvSpec, algo: Algorithm, seed: int = 0) -> Policy:
        """An untrained policy of the run's shape. Drawing its initial weights leaves the
        global torch random state as it was (they are overwritten by what is loaded)."""
        with torch.random.fork_rng(devices=[]):
            module = algo.acting_module(config, spec)
        return cls(module, config, spec, seed)

    def load_vector(self, vector: np.ndarray) -> None:
        """Take the parameters of a published policy version (the flat float32 vector actors
        read): how evaluations during training receive the newest policy."""
        if self._flat is None:
            self._flat = FlatParams(self.module)
        self._flat.read_from(vector)

    @property
    def recurrent(self) -> bool:
        """Whether the policy has a hidden state (``--recurrent lstm`` or ``gru``): then
        :meth:`act` takes and returns it."""
        return bool(getattr(self.module, "recurrent", False))

    def initial_state(self, n: int | None = None) -> np.ndarray:
        """A recurrent policy's hidden state at an episode's start (zeros): ``[S, rnn_size]``
        for one env (``n`` None), ``[n, S, rnn_size]`` for a batch of ``n`` (S = 2 for an
        LSTM, h and c; 1 for a GRU)."""
        if not self.recurrent:
            raise TypeError("initial_state: a feed-forward policy has no state; call act(obs)")
        state = self.module.initial_state(1 if n is None else n).numpy()
        return state[0] if n is None else state

    def act(self, obs: Any, state: Any = None, deterministic: bool = True) -> Any:
        """The action for one observation, or actions for a batch of them.

        ``obs`` of the env's observation shape gives one action: an ``int`` for a discrete
        action space, an array of the action shape for a continuous one. A batch (an extra
        leading axis) gives an array with the same leading axis. Continuous actions are
        clipped to the action space, as the env receives them in training. ``deterministic``
        takes the policy's mode (the mean; SAC: the squashed mean); otherwise actions are
        sampled with this policy's own generator (the global random state is not used).

        A recurrent policy returns ``(action, next_state)``: ``state`` is what the previous
        call returned, or :meth:`initial_state` (None: an episode's start) at the first step
        of an episode; one state per observation, with the batch's leading axis.
        """
        if isinstance(state, bool):
            raise TypeError("act: deterministic is a keyword argument: act(obs, deterministic=...)")
        if state is not None and not self.recurrent:
            raise TypeError("act: a feed-forward policy takes no state; call act(obs)")
        x = np.asarray(obs, dtype=self.spec.obs_dtype)  # as actors hand it over
        shape = self.spec.obs_shape
        single = x.shape == shape
        if not single and x.shape[1:] != shape:
            raise ValueError(
                f"obs of shape {x.shape}: expected {shape} (one observation) or "
                f"(batch, {', '.join(map(str, shape))}) (a batch)"
            )
        batch = torch.from_numpy(x[None] if single else x)
        with torch.no_grad():
            if self.recurrent:
                h = self._state_batch(state, batch.shape[0], single)
                action, _, h = self.module.act(batch, deterministic, self.generator, state=h)
            else:
                action, _ = self.module.act(batch, deterministic, self.generator)
        a = action.numpy()
        if not self.spec.discrete:
            a = np.clip(a, self.spec.action_low, self.spec.action_high)
        elif self.spec.action_start:  # the env's own numbering (Discrete(n, start))
            a = a + self.spec.action_start
        if single:
            a = int(a[0]) if self.spec.discrete else a[0]
        if not self.recurrent:
            return a
        return a, (h[0] if single else h).numpy()

    def play_vs(
        self,
        opponent: str = "random",
        games: int = 200,
        seed: int = 10_000,
        deterministic: bool = True,
        video: str | Path | None = None,
    ) -> dict[str, float]:
        """Win, draw and loss rates in ``games`` games of the run's two-player game against
        ``opponent``: ``random`` (uniform over the legal moves), ``lookahead`` (connect
        four's one-step look-ahead: wins if it can, blocks if it must, else random) or
        ``pool`` (the snapshots of a ``--opponents pool`` run's pool at this checkpoint, in
        turn, each sampling its moves as in training), half as the first player and half as
        the second (:func:`asyncrl.envs.pettingzoo.play_vs`; game ``i`` seeded ``seed + i``).
        ``video``: also record the games (the same games) as an animated GIF at that path, a
        frame after each game's start and each move."""
        from asyncrl.envs.pettingzoo import play_vs

        players = self._snapshots(seed) if opponent == "pool" else None
        self.generator.manual_seed(seed)
        choose = lambda row: self.act(row, deterministic=deterministic)  # noqa: E731
        env_id = self.config.env
        if video is None:
            return play_vs(env_id, choose, opponent, games, seed, players)
        check_video(video, env_id)
        with recording(video, env_id) as record:
            return play_vs(env_id, choose, opponent, games, seed, players, record)

    def _snapshots(self, seed: int) -> list[Callable[[np.ndarray], int]]:
        """The pool's snapshots as players, each with a generator of its own."""
        from asyncrl.envs.pettingzoo import check_opponent

        check_opponent(self.config.env, "pool", pool=bool(self.pool))
        players = []
        for k, (sid, params) in enumerate(zip(self.pool["ids"], self.pool["params"], strict=True)):
            if int(sid) < 0:  # an empty buffer of the pool
                continue
            snapshot = Policy(copy.deepcopy(self.module), self.config, self.spec, seed + 1 + k)
            snapshot.load_vector(torch.as_tensor(params).numpy())
            players.append(lambda row, s=snapshot: s.act(row, deterministic=False))
        return players

    def play_vs_random(
        self, games: int = 200, seed: int = 10_000, deterministic: bool = True
    ) -> dict[str, float]:
        """:meth:`play_vs` against the uniform random player."""
        return self.play_vs("random", games, seed, deterministic)

    def _state_batch(self, state: Any, n: int, single: bool) -> torch.Tensor:
        """``state`` as the module's [n, S, H] tensor (None: zeros), its shape checked."""
        if state is None:
            return self.module.initial_state(n)
        h = torch.as_tensor(np.asarray(state, dtype=np.float32))
        want = (n, *self.module.state_shape)
        if (h[None] if single else h).shape != want:
            expected = want[1:] if single else want
            raise ValueError(f"state of shape {tuple(h.shape)}: expected {expected}")
        return h[None] if single else h

    def evaluate(
        self,
        episodes: int = 10,
        seed: int = 10_000,
        deterministic: bool = True,
        video: str | Path | None = None,
    ) -> EvalResult:
        """Run ``episodes`` episodes on a fresh env of the run's id, episode ``i`` reset with
        seed ``seed + i``; returns their returns and lengths. ``video``: also record them,
        rendered off-screen, as an animated GIF at that path (one frame after each reset and
        after every step: ``sum(lengths) + episodes`` frames). Raises :class:`VideoError`
        (one line naming what is missing) if the env cannot render here."""
        if episodes < 1:
            raise ConfigError(f"episodes: must be >= 1, got {episodes}")
        self.generator.manual_seed(seed)  # a stochastic evaluation repeats for its seed
        seeds = range(seed, seed + episodes)
        if video is None:
            env = make_env(self.config.env, atari_preprocessing=self.config.atari_preprocessing)
            try:
                return run_episodes(self, env, seeds, deterministic)
            finally:
                env.close()
        return self._record(Path(video), seeds, deterministic)

    def _record(self, path: Path, seeds: Sequence[int], deterministic: bool) -> EvalResult:
        env_id = self.config.env
        check_video(path, env_id, self.config.atari_preprocessing)
        try:  # the run's env made without rendering (load() did); what fails now is rendering
            env = make_env(
                env_id,
                render_mode="rgb_array",
                atari_preprocessing=self.config.atari_preprocessing,
            )
        except Exception as e:
            raise VideoError(_render_problem(env_id, e)) from None
        try:
            with recording(path, env_id) as record:
                return run_episodes(self, env, seeds, deterministic, record)
        finally:
            env.close()


_PROBE = """
import sys, warnings
warnings.filterwarnings("ignore")
from asyncrl.envs import make_env
env = make_env(sys.argv[1], render_mode="rgb_array", atari_preprocessing=sys.argv[2] == "1")
env.reset(seed=0)
env.render()
"""
_RENDERED: set[tuple[str, str | None]] = set()  # (env, MUJOCO_GL) whose probe drew a frame


def probe_rendering(env_id: str, atari_preprocessing: bool = True) -> None:
    """Draw a MuJoCo env's first off-screen frame in a child process, within
    ``$ASYNCRL_RENDER_TIMEOUT`` seconds (default :data:`RENDER_TIMEOUT`): an OpenGL library
    that hangs (stock Debian Mesa with MUJOCO_GL=egl did, silently) ends in one
    :class:`VideoError` line naming what to install, never in a wait. A probe that fails
    otherwise is not reported here: recording then fails and says why in one line."""
    if not _renders_with_mujoco(env_id) or (env_id, os.environ.get("MUJOCO_GL")) in _RENDERED:
        return
    try:
        timeout = float(os.environ.get("ASYNCRL_RENDER_TIMEOUT") or RENDER_TIMEOUT)
    except ValueError:
        raise ConfigError(
            f"ASYNCRL_RENDER_TIMEOUT: must be seconds, got {os.environ['ASYNCRL_RENDER_TIMEOUT']!r}"
        ) from None
    child = subprocess.Popen(
        [sys.executable, "-c", _PROBE, env_id, "1" if atari_preprocessing else "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        try:  # a process stuck in a driver may not die at once: do not wait for it long
            child.wait(5)
        except subprocess.TimeoutExpired:
            pass
        raise VideoError(
            f"video: {env_id} drew no frame within {timeout:g} s with {_gl_setting()}: its "
            "OpenGL library hangs (older Mesa does with egl); install a current Mesa with "
            "OSMesa (apt-get install libosmesa6) and use MUJOCO_GL=osmesa or egl"
        ) from None
    if child.returncode == 0:
        _RENDERED.add((env_id, os.environ.get("MUJOCO_GL")))


def _renders_with_mujoco(env_id: str) -> bool:
    import gymnasium as gym

    try:
        return "mujoco" in str(gym.spec(env_id.split(":")[-1]).entry_point)
    except Exception:
        return False


def _gl_setting() -> str:
    gl = os.environ.get("MUJOCO_GL")
    return "MUJOCO_GL unset (glfw, which needs a display)" if gl is None else f"MUJOCO_GL={gl!r}"


def _render_problem(env_id: str, err: BaseException) -> str:
    """One line: why ``env_id`` cannot render off-screen, and what it needs."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    detail = f"{type(err).__name__}: {lines[0] if lines else 'no detail'}"
    if _renders_with_mujoco(env_id):
        now = _gl_setting()
        return (
            f"video: {env_id} cannot render off-screen with {now} ({detail}); MuJoCo renders "
            "off-screen with MUJOCO_GL=egl (needs libEGL) or MUJOCO_GL=osmesa (needs libOSMesa)"
        )
    if "pygame" in detail:
        return (
            f"video: {env_id} renders with pygame, which is not installed; install it with "
            'pip install "gymnasium[classic-control]"'
        )
    return f"video: {env_id} cannot render off-screen ({detail})"


def check_video(path: str | Path, env_id: str, atari_preprocessing: bool = True) -> None:
    """What a recording needs, before its env is made: a directory to write in, and (MuJoCo)
    an OpenGL library that draws (:func:`probe_rendering`)."""
    if not Path(path).parent.is_dir():
        raise VideoError(f"video: the directory {Path(path).parent} does not exist")
    probe_rendering(env_id, atari_preprocessing)


@contextlib.contextmanager
def recording(path: str | Path, env_id: str) -> Iterator[Callable[[Any], None]]:
    """A GIF at ``path`` for the duration of the block, which records with ``record(env)``
    (the env's rgb_array frame appended; the first env's ``render_fps`` sets the GIF's):
    complete once the block ends, removed if it fails; a frame that cannot be drawn, or a file
    that cannot be written, is one :class:`VideoError` line. (:func:`check_video` first.)"""
    from asyncrl.video import GifWriter

    path = Path(path)
    writer: GifWriter | None = None

    def record(env: Any) -> None:
        nonlocal writer
        try:
            with warnings.catch_warnings():  # GLFW warns about a missing display, then fails
                warnings.filterwarnings("ignore", module="glfw")
                frame = env.render()
        except Exception as e:  # what rendering needs is missing: say it in one line
            raise VideoError(_render_problem(env_id, e)) from None
        if frame is None:
            raise VideoError(f"video: {env_id} rendered no rgb_array frame")
        if writer is None:
            writer = GifWriter(path, env.metadata.get("render_fps") or 30)
        writer.add(frame)

    try:
        yield record
        if writer is None:
            raise VideoError(f"video: no frame was recorded for {path}")
        writer.close()
    except BaseException as e:
        if writer is not None:
            writer.abort()
        if isinstance(e, OSError):  # the file cannot be written (permissions, a full disk)
            raise VideoError(f"video: cannot write {path}: {e.strerror or e}") from e
        raise


def run_episodes(
    policy: Policy,
    env: Any,
    seeds: Sequence[int],
    deterministic: bool = True,
    record: Callable[[Any], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> EvalResult:
    """One episode per seed on ``env`` (reset with that seed), acting with ``policy``.
    ``record(env)`` is called after every reset and step; ``stop()``, if given, is asked before
    every step and ends the evaluation early (the episodes finished so far are returned)."""
    returns: list[float] = []
    lengths: list[int] = []
    for s in seeds:
        obs, _ = env.reset(seed=int(s))
        if record is not None:
            record(env)
        total, steps, done = 0.0, 0, False
        state = policy.initial_state() if policy.recurrent else None  # an episode's start
        while not done:
            if stop is not None and stop():
                return EvalResult(returns, lengths)
            if state is None:
                action = policy.act(obs, deterministic=deterministic)
            else:
                action, state = policy.act(obs, state, deterministic=deterministic)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            steps += 1
            done = bool(terminated or truncated)
            if record is not None:
                record(env)
        returns.append(total)
        lengths.append(steps)
    return EvalResult(returns, lengths)


def load(
    run_dir: str | Path, checkpoint: str = "latest", seed: int = 0, policy: int | None = None
) -> Policy:
    """The policy saved in ``run_dir``: its newest checkpoint (``"latest"``, falling back to an
    older one if the newest is damaged), the one that evaluated best during training
    (``"best"``, kept with ``eval_every``), or a checkpoint file of the run (a path, or a name
    inside ``run_dir``: ``"checkpoint-000004.pt"``, ``"policy_1/checkpoint-000004.pt"``).
    ``seed`` seeds the policy's own generator, used only for stochastic actions. ``policy``:
    of a population run (``--policies``), policy ``i``'s newest checkpoint (default: the
    population's best policy at the run's newest checkpoint). Raises ConfigError (naming the
    run directory or the checkpoint) if there is no such run, policy or checkpoint."""
    cfg = load_run_config(run_dir)
    path = None if checkpoint in CHECKPOINTS else _checkpoint_file(run_dir, checkpoint)
    if policy is not None and not 0 <= policy < cfg.policies:
        raise ConfigError(f"policy: {run_dir} holds policies 0 to {cfg.policies - 1}, got {policy}")
    spec = check_env(cfg.env, cfg.atari_preprocessing)
    index, pool = None, None
    if checkpoint == "best" or path is not None:  # best: a population's best policy
        state = load_best_checkpoint(run_dir) if path is None else load_checkpoint_at(path)
        if cfg.policies > 1:  # which policy: the best one's "eval" names it, else its folder
            folder = None if path is None else policy_of(path.resolve().parent)
            index = (state.get("eval") or {}).get("policy", folder)
        if policy is not None and policy != index:
            raise ConfigError(
                f"policy: the {checkpoint} checkpoint of {run_dir} holds policy {index}, not "
                f"{policy}; leave --policy out, or take its latest checkpoint"
            )
    elif cfg.policies > 1:
        # the run's newest checkpoint: the population's best, and its pool (the policies')
        needed = policy is None or cfg.opponents == "pool"
        run_state = load_checkpoint(run_dir) if needed else {}
        if policy is None:
            policy = int((run_state.get("population") or {}).get("leader", 0))
        index = policy
        state = load_checkpoint(policy_dir(run_dir, policy))
        pool = run_state.get("pool")
    else:
        state = load_checkpoint(run_dir)
    if spec.seats:  # agents of different spaces: the policy's own
        from asyncrl.envs.pettingzoo import saved_policy_spec

        spec = saved_policy_spec(cfg, spec, index or 0)
    if index is not None:
        cfg = policy_config(cfg, index)
    algo = plugin(cfg)  # the saved run's
    policy_ = Policy.build(cfg, spec, algo, seed)
    policy_.index = index
    try:
        acting = algo.acting_state(state)
    except KeyError:  # a population's own checkpoint: its policies' are in policy_<i>/
        raise ConfigError(
            f"checkpoint: {checkpoint} holds no policy (a population's policies are in "
            f"{run_dir}/policy_<i>/: name one of their checkpoints, or give --policy alone)"
        ) from None
    policy_.module.load_state_dict(acting)
    if "learner" in state:
        policy_.env_steps = int(state["learner"]["counters"]["env_steps"])
    else:
        policy_.env_steps = int(state.get("env_steps", 0))
    policy_.evaluation = state.get("eval")
    policy_.pool = state.get("pool", pool)
    return policy_


def _checkpoint_file(run_dir: str | Path, checkpoint: str) -> Path:
    """The file ``checkpoint`` names: a path, or a name inside ``run_dir``."""
    for path in (Path(checkpoint), Path(run_dir) / checkpoint):
        if path.is_file():
            return path
    raise ConfigError(
        f"checkpoint: {checkpoint!r} is neither {' nor '.join(CHECKPOINTS)} nor a checkpoint "
        f"file (as a path, or inside {run_dir})"
    )
