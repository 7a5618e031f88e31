"""The command line: ``asyncrl train`` and ``asyncrl eval``; the studies ``compare``,
``tune`` and ``sweep``; ``check-env``, which checks an env before a run on it; ``export``,
which writes a saved policy as an ONNX file.

Every field of TrainConfig is a kebab-case flag whose help and default come from the field.
Precedence: defaults < ``--config FILE`` < flags given on the command line (< nothing else), and
for ``--resume`` the saved run's config takes the place of the defaults. ``asyncrl train`` is
the Python API's ``asyncrl.train`` with the flags as keywords; ``asyncrl eval`` acts through
the same ``Policy`` as ``asyncrl.load``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from asyncrl.config import ConfigError, load_yaml
from asyncrl.envs.pettingzoo import OPPONENT_NAMES, OPPONENTS
from asyncrl.settings import FIELDS, KINDS, TrainConfig, from_dict, nearest_name, preset_help

SUMMARY_KEYS = (
    "env",
    "mode",
    "backend",
    "env_steps",
    "wall_seconds",
    "final_return",
    "T",
    "eps",
    "env_steps_per_second",
    "policy_lag_mean",
    "policy_lag_max",
    "rollout_seconds",
    "learn_seconds",
    "learner_wait_seconds",
    "actor_wait_seconds",
    "run_dir",
)


def _str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _or_auto(parse: Any) -> Any:
    """A flag of a preset-governed setting: ``auto`` leaves it to the preset (as not giving it)."""

    def convert(text: str) -> Any:
        return None if text == "auto" else parse(text)

    convert.__name__ = getattr(parse, "__name__", "value")  # argparse names it in errors
    return convert


def _one_of(choices: tuple[str, ...]) -> Any:
    def parse(text: str) -> str:
        if text not in choices:
            choose = ", ".join(repr(c) for c in choices)
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {choose})")
        return text

    parse.__name__ = "choice"
    return parse


def _whole_number(text: str) -> int:
    """An integer setting as people write it: ``1000000``, ``1_000_000`` or ``1e6`` (as YAML
    files take it); ``2.5`` is refused, not rounded."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def _add_config_flags(parser: argparse.ArgumentParser, owned: tuple[str, ...] = ()) -> None:
    """One flag per TrainConfig field, except those the command sets itself (``owned``). The
    flag parses the field's declared type (a preset-governed field is ``float | None``: None
    means not set, and its default is the presets' value)."""
    defaults = TrainConfig()
    for name, f in FIELDS.items():
        if name in owned or f.metadata.get("cli") is False:  # population: YAML lists only
            continue
        flag = "--" + name.replace("_", "-")
        default = getattr(defaults, name)
        kind = KINDS[name]
        kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
        help_text = f.metadata.get("help", "")
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            items = _str_list if f.metadata.get("items") is str else _int_list
            kw["type"] = {list: items, int: _whole_number}.get(kind, kind)
            if f.metadata.get("choices"):
                kw["choices"] = f.metadata["choices"]
        if f.metadata.get("preset"):
            if "type" in kw:
                kw["type"] = _or_auto(kw["type"])
            if "choices" in kw:  # auto is one more choice: the preset's value
                choices = (*kw.pop("choices"), "auto")
                kw["type"] = _or_auto(_one_of(choices))
                kw["metavar"] = "{" + ",".join(choices) + "}"
            shown = f"from --preset: {preset_help(name)}"
        elif "shown" in f.metadata:  # what an empty default stands for
            shown = f.metadata["shown"]
        elif isinstance(default, list):
            shown = ",".join(map(str, default))
        else:
            shown = default if default not in ("", None) else "auto"
        kw["help"] = f"{help_text} (default: {shown})".replace("%", "%%")
        parser.add_argument(flag, **kw)


COMPARE_OWNS = ("envs_per_actor", "mode", "total_steps", "max_seconds", "run_dir")
TUNE_OWNS = ("actors", "envs_per_actor", "backend", "total_steps", "max_seconds", "run_dir")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, refusing bad input in one line: argparse's own prints the usage first,
    70 lines for ``train``, which pushes the reason off the screen."""

    commands: dict[str, argparse.ArgumentParser]

    def add_subparsers(self, **kw: Any) -> Any:
        sub = super().add_subparsers(**kw)
        self.commands = sub.choices
        return sub

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _refuse_unknown(parser: _Parser, command: str, extra: list[str]) -> NoReturn:
    """Refuses flags the command does not take, naming the nearest it does."""
    sub = parser.commands[command]
    names = [f[2:].replace("-", "_") for f in sub._option_string_actions if f.startswith("--")]
    near = [
        "--" + n.replace("_", "-")
        for arg in extra
        if arg.startswith("--") and (n := nearest_name(arg[2:].split("=")[0], names))
    ]
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    sub.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def build_parser() -> _Parser:
    parser = _Parser(
        prog="asyncrl",
        description="Actor-learner RL: N actors x K envs feed one learner, sync or async.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train a policy (default: async PPO on CartPole-v1)")
    tr.add_argument("--config", help="YAML file of settings (flags given here override it)")
    run_dir_use = tr.add_mutually_exclusive_group()
    run_dir_use.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR"
    )
    run_dir_use.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in a --run-dir that holds a run: first delete that run's config.yaml, "
        "checkpoints, metrics.jsonl, summary.json and tb/ (other files stay)",
    )
    _add_config_flags(tr)
    cmp = sub.add_parser(
        "compare",
        help="sync vs async over K: table of T and EPS, time to a target return, plots",
        description="Train one run per K and mode, one after another, then write the table "
        "(Markdown, CSV) and plots. Every other train flag sets all runs.",
    )
    cmp.add_argument(
        "--ks", type=_int_list, default=[32, 48, 96], help="K values (default: 32,48,96)"
    )
    cmp.add_argument(
        "--modes", type=_str_list, default=["sync", "async"], help="modes (default: sync,async)"
    )
    cmp.add_argument(
        "--steps", type=int, default=150_000, help="env steps per run (default: 150000)"
    )
    cmp.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="also stop each run after this (default: 0, none)",
    )
    cmp.add_argument("--target-return", type=float, default=None, help="report steps/time to it")
    cmp.add_argument("--out", default="", help="study directory (default: runs/compare-<env>-...)")
    cmp.add_argument("--reuse", action="store_true", help="keep finished runs of the same settings")
    cmp.add_argument("--config", help="YAML file of settings for every run")
    _add_config_flags(cmp, owned=COMPARE_OWNS)
    tn = sub.add_parser(
        "tune",
        help="probe N, K and backend on this machine; recommend the fastest setting",
        description="Short training probes over every backend x N x K, cut off by wall-clock "
        "time; prints the measured T, EPS, env steps/s and lag, and a recommendation.",
    )
    tn.add_argument("--ns", type=_int_list, default=[1, 2, 4], help="actor counts (default: 1,2,4)")
    tn.add_argument("--ks", type=_int_list, default=[8, 16, 32], help="K values (default: 8,16,32)")
    tn.add_argument(
        "--backends", type=_str_list, default=["process"], help="backends (default: process)"
    )
    tn.add_argument(
        "--seconds", type=float, default=180.0, help="time budget of all probes (default: 180)"
    )
    tn.add_argument(
        "--out", default="", help="where probes and tune.md go (default: runs/tune-...)"
    )
    tn.add_argument("--config", help="YAML file of settings for every probe")
    _add_config_flags(tn, owned=TUNE_OWNS)
    sw = sub.add_parser(
        "sweep",
        help="search training settings for the best return: Optuna trials, pruned as they run",
        description="Trials of asyncrl train over a YAML search space (docs: Guides, sweeps), "
        "several at a time, bad ones pruned from their metrics; at the end a table of the "
        "trials and best.yaml, the best trial's settings. Ctrl+C stops it; --resume goes on.",
    )
    sw.add_argument("file", nargs="?", help="the sweep file (base settings, space, objective)")
    sw.add_argument("--resume", metavar="SWEEP_DIR", help="go on with the sweep in SWEEP_DIR")
    sw.add_argument("--out", default="", help="sweep directory (default: runs/sweep-<env>-...)")
    sw.add_argument(
        "--trials", type=int, default=None, help="trials to finish (default: 20, or as saved)"
    )
    sw.add_argument("--jobs", type=int, default=None, help="trials at a time (default: 1)")
    sw.add_argument(
        "--storage",
        default=None,
        help="an Optuna storage URL, e.g. postgresql://... for several machines (default: "
        "SQLite, optuna.db in the sweep directory)",
    )
    sw.add_argument("--study-name", default=None, help="default: the sweep directory's name")
    sw.add_argument("--seed", type=int, default=None, help="the sampler's seed (default: 0)")
    sw.add_argument(
        "--pruner",
        choices=("median", "halving", "none"),
        default=None,
        help="Optuna's median pruner, successive halving, or none (default: median)",
    )
    ce = sub.add_parser(
        "check-env",
        help="check an env before training on it: Gymnasium's checker and what asyncrl needs",
        description="Gymnasium's env checker, then the spaces the algorithms take, seeded "
        "determinism, observation dtype and bounds, finite values over a short random rollout, "
        "the time per step and the N x K asyncrl tune would likely recommend, as a table. "
        "Exits 1 if any check FAILs.",
    )
    ce.add_argument("env_id", metavar="ID", help="a Gymnasium env id, or module:EnvId")
    ce.add_argument(
        "--steps", type=_whole_number, default=1000, help="random steps (default: 1000)"
    )
    ce.add_argument(
        "--seed", type=int, default=0, help="seed of the resets and actions (default: 0)"
    )
    ce.add_argument(
        "--algo",
        choices=FIELDS["algo"].metadata["choices"],
        default=None,
        help="the algorithm the spaces must suit (default: any of them)",
    )
    ev = sub.add_parser("eval", help="mean and std of the return of a saved policy")
    ev.add_argument("run_dir", help="a run directory written by asyncrl train")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to run (default: 10)")
    ev.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    ev.add_argument(
        "--seed",
        type=int,
        default=10_000,
        help="env seed of the first episode; episode i is reset with seed + i (default: 10000)",
    )
    ev.add_argument(
        "--checkpoint",
        choices=("latest", "best"),
        default="latest",
        help="latest: the newest checkpoint; best: checkpoint-best.pt, the policy that evaluated "
        "best during training (--eval-every) (default: latest)",
    )
    ev.add_argument(
        "--policy",
        type=int,
        default=None,
        help="a population run's policy i (default: its best policy; a run of one policy: it)",
    )
    ev.add_argument(
        "--opponent",
        choices=OPPONENTS,
        default=None,
        help="a game's opponent: random, uniform over the legal moves; lookahead, connect "
        "four's one-step look-ahead (wins if it can, blocks if it must); or pool, the "
        "snapshots of a --opponents pool run's pool at the checkpoint, in turn; --episodes "
        "games, half as the first player (default: random)",
    )
    ev.add_argument(
        "--video",
        metavar="FILE",
        help="also record the episodes (a game's: its games), rendered off-screen, as an "
        "animated GIF (MuJoCo envs need MUJOCO_GL=egl or osmesa; classic-control envs and "
        "PettingZoo's classic games need pygame)",
    )
    ev.add_argument(
        "--wandb",
        action="store_true",
        help="also log the result (and the video) to the run's W&B run, or to a new one with "
        "the run's --wandb-* settings if it has none (pip install 'asyncrl[wandb]')",
    )
    ex = sub.add_parser(
        "export",
        help="write a saved policy's deterministic acting path as an ONNX file",
        description="The policy asyncrl eval acts with (observation normaliser folded in; "
        "recurrent: the state as an input and an output) as an ONNX graph from a batch of raw "
        "observations to the actions the env receives. Checked before it is kept: onnxruntime "
        "and PyTorch act on observations of the run's env (random actions, seeded); exits 1, "
        "writing nothing, if they disagree. Needs pip install 'asyncrl[onnx]'.",
    )
    ex.add_argument("run_dir", metavar="RUN", help="a run directory written by asyncrl train")
    ex.add_argument("--onnx", required=True, metavar="FILE", help="the ONNX file to write")
    ex.add_argument(
        "--checkpoint",
        default="latest",
        metavar="latest|best|PATH",
        help="latest: the newest checkpoint; best: checkpoint-best.pt (--eval-every); or a "
        "checkpoint file, as a path or a name inside RUN (default: latest)",
    )
    ex.add_argument(
        "--policy",
        type=int,
        default=None,
        help="a population run's policy i (default: its best policy; a run of one policy: it)",
    )
    ex.add_argument(
        "--observations",
        type=_whole_number,
        default=1000,
        help="observations the check compares actions on (default: 1000)",
    )
    ex.add_argument(
        "--seed", type=int, default=0, help="seed of the check's env and actions (default: 0)"
    )
    return parser


def _train(args: argparse.Namespace) -> int:
    from asyncrl.api import train

    given = {k: v for k, v in vars(args).items() if k in FIELDS}
    # validated before the run directory is claimed: a setting that cannot work must not cost
    # the run --overwrite would delete
    result = train(config=args.config, resume=args.resume, overwrite=args.overwrite, **given)
    _print_summary(result.summary)
    return 0


def _base_config(args: argparse.Namespace) -> TrainConfig:
    base = TrainConfig()
    if args.config:
        base = from_dict(load_yaml(args.config), base)
    return dataclasses.replace(base, **{k: v for k, v in vars(args).items() if k in FIELDS})


def _compare(args: argparse.Namespace) -> int:
    from asyncrl.study.compare import compare

    compare(
        _base_config(args),
        args.ks,
        args.modes,
        args.steps,
        args.minutes,
        args.target_return,
        args.out,
        args.reuse,
    )
    return 0


def _tune(args: argparse.Namespace) -> int:
    from asyncrl.study.tune import tune

    tune(_base_config(args), args.ns, args.ks, args.backends, args.seconds, args.out)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from asyncrl.study.sweep import sweep

    result = sweep(
        args.file,
        args.out,
        args.trials,
        args.jobs,
        args.storage,
        args.study_name,
        args.seed,
        args.pruner,
        args.resume,
    )
    return 130 if result.interrupted else 0


def _check_env(args: argparse.Namespace) -> int:
    from asyncrl.envcheck import check, render

    report = check(args.env_id, args.steps, args.seed, args.algo)
    render(report)
    return 1 if report.failed else 0


def _export(args: argparse.Namespace) -> int:
    from asyncrl.export import export

    done = export(
        args.run_dir, args.onnx, args.checkpoint, args.policy, args.observations, args.seed
    )
    which = "" if done["policy"] is None else f" policy {done['policy']},"
    print(
        f"exported {done['algo']} on {done['env']} ({done['checkpoint']} checkpoint,{which} "
        f"{done['env_steps']:,} env steps) to {done['onnx']} ({done['bytes']:,} bytes)"
    )
    for kind, names in (("input ", done["inputs"]), ("output", done["outputs"])):
        for name, (shape, dtype, what) in names.items():
            print(f"  {kind} {name} [{', '.join(map(str, shape))}] {dtype}: {what}")
    print(
        f"checked: onnxruntime beside PyTorch on {done['agreement'].observations} observations "
        f"of {done['env']} (random actions, seed {done['seed']}): {done['agreement'].line()}"
    )
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="run summary", show_header=False)
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    Console().print(table)


@contextlib.contextmanager
def _offscreen_pygame(on: bool) -> Iterator[None]:
    """Classic-control envs render through pygame, whose SDL looks for a display (and prints an
    error line where there is none) unless told to draw off-screen, as a video does."""
    if not on or "SDL_VIDEODRIVER" in os.environ:
        yield
        return
    os.environ["SDL_VIDEODRIVER"] = "dummy"
    try:
        yield
    finally:
        del os.environ["SDL_VIDEODRIVER"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _refuse_unknown(parser, args.command, extra)
    from asyncrl.core import NonFiniteError
    from asyncrl.export import ExportError
    from asyncrl.rundir import CheckpointReadError, CheckpointWriteError
    from asyncrl.runtime.faults import ActorError, LearnerLost
    from asyncrl.runtime.lifecycle import Aborted, Interrupted

    try:
        if args.command == "train":
            return _train(args)
        if args.command == "compare":
            return _compare(args)
        if args.command == "tune":
            return _tune(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "check-env":
            return _check_env(args)
        if args.command == "export":
            return _export(args)
        from asyncrl.evaluate import evaluate

        if args.episodes < 1:
            raise ConfigError(f"episodes: must be >= 1, got {args.episodes}")
        with _offscreen_pygame(bool(args.video)):
            result = evaluate(
                args.run_dir,
                args.episodes,
                not args.stochastic,
                args.seed,
                checkpoint=args.checkpoint,
                video=args.video,
                policy=args.policy,
                wandb=args.wandb,
                opponent=args.opponent,
            )
        if "games" in result:  # a multi-agent run: games against an opponent
            vs = args.opponent or "random"
            rates = [result[f"{k}_rate_vs_{vs}"] for k in ("win", "draw", "loss")]
            print(
                f"win {rates[0]:.3f} draw {rates[1]:.3f} loss {rates[2]:.3f} over "
                f"{result['games']} games against {OPPONENT_NAMES[vs]}"
            )
        else:
            print(
                f"{result['mean_return']:.2f} +/- {result['std_return']:.2f} "
                f"over {result['episodes']} episodes (mean length {result['mean_length']:.1f})"
            )
        if args.video:
            if "games" in result:
                from PIL import Image

                with Image.open(args.video) as gif:
                    frames = gif.n_frames
            else:
                frames = sum(result["lengths"]) + result["episodes"]
            print(f"video: {args.video} ({frames} frames)")
        print(json.dumps(result))
        return 0
    except ConfigError as e:
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 2
    except ExportError as e:
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 1
    except (ActorError, LearnerLost) as e:
        print(f"asyncrl: {e}", file=sys.stderr)
        return 1
    except CheckpointWriteError as e:  # the final one; the newest earlier checkpoint stands
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 1
    except CheckpointReadError as e:  # an intact checkpoint not read: nothing was changed
        print(f"asyncrl: error: {e.strerror}", file=sys.stderr)
        return 1
    except NonFiniteError:  # the run's last line said where
        return 1
    except KeyboardInterrupt as e:
        if not isinstance(e, Interrupted | Aborted):  # those said how the run ended
            print("asyncrl: interrupted before training began", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
