"""Atari Breakout frames per second (frames = agent steps x 4, the frame skip), one run, four
systems side by side with the same 2 workers x 8 envs where the system has workers:

- asyncrl async PPO (2 actors x 8 envs, the atari preset, process backend), Gymnasium vectoriser;
- the same with the EnvPool vectoriser;
- Sample Factory 2.1.1's Atari example (APPO; its own venv, benchmarks/.venvs/sf; see
  --sf-python), 2 rollout workers x 8 envs, its Atari defaults but --async_rl=True;
- Stable-Baselines3 PPO with its Atari wrappers and rl-zoo's Atari settings, 8 envs in one
  process (its own venv, benchmarks/.venvs/sb3; see --sb3-python).

    python benchmarks/atari_throughput.py            # ~7 min: 60 s a system after warm-up

Every figure is *training* throughput: env frames the learner consumed, per second of wall
time after warm-up (process start-up and the first training iteration left out), so the
Nature-CNN learner on a CPU core is inside every figure. asyncrl runs for --seconds in all
(``max_seconds``), Sample Factory and SB3 for --seconds after their warm-up. How each is read:

- asyncrl: ``env_steps_per_second`` of its summary (steps from the end of the first iteration
  to the last, over the time between them) x 4.
- Sample Factory: its own ``Total num frames`` reports (learner env steps x frameskip, since
  the Atari example sets ``summaries_use_frameskip``): the frames added between the first
  report that shows the counter moved and the last that does, over the time between the two
  reports (its log's timestamps). Its counter moves in whole training iterations (1,024
  samples, 4,096 frames) and reports come every 5 s, so a short run's figure is uncertain by
  about 5 s over --seconds.
  The benchmark stops it (SIGINT, then SIGKILL after 30 s) --seconds after training began.
- SB3: agent steps x 4 between the start of its second rollout and the start of its last one
  (whole collect-and-update cycles), in benchmarks/baselines/sb3_ppo_atari.py.

Where the settings differ (all use CleanRL's PPO numbers: rollout 128, 4 epochs x 4 minibatches
of 256 per 1,024 samples, lr 2.5e-4 annealed, clip 0.1, entropy 0.01, frame skip 4 with max
pooling, 84x84 gray, 4 stacked frames, episodic life, reward clipping):
- Sample Factory's Atari example defaults to sync mode, which refuses 2 workers x 8 envs
  ("Ratio is 0.5 (should be a positive integer)": 2,048 samples a rollout against 1,024 a
  training iteration); --async_rl=True is its own suggested fix and matches asyncrl's mode.
  It also normalises inputs and returns (asyncrl's preset and SB3 do not), and runs its rollout
  workers at nice 10 and its inference worker at nice 2 (asyncrl's actors run at nice 0):
  on a machine others load, its env stepping yields to their processes.
- Sample Factory and SB3 use the v4 ``NoFrameskip`` id (no sticky actions, FIRE on reset);
  asyncrl uses ``ALE/Breakout-v5`` (sticky actions 0.25, no FIRE); Gymnasium's ALE 0.12.1 for
  asyncrl and SB3, ale-py 0.9.1 for Sample Factory (its venv pins gymnasium 0.29).
- SB3 has no separate actors: its 8 envs and its learner share one process (DummyVecEnv).

Prints one JSON line per system as it ends, then a table and the ratios to Sample Factory and
SB3. With ``--rounds R`` the systems run R times, alternating, and the table holds medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

FRAME_SKIP = 4
HERE = Path(__file__).resolve().parent
NAMES = {
    "gymnasium": "asyncrl async, gymnasium",
    "envpool": "asyncrl async, envpool",
    "sf": "sample-factory 2.1.1 APPO",
    "sb3": "sb3 PPO",
}


def asyncrl_run(vectorizer: str, seconds: float, actors: int, envs: int) -> dict:
    import asyncrl

    with tempfile.TemporaryDirectory() as run_dir:
        t0 = time.perf_counter()
        result = asyncrl.train(
            "ALE/Breakout-v5",
            vectorizer=vectorizer,
            mode="async",
            backend="process",
            actors=actors,
            envs_per_actor=envs,
            total_steps=10**9,
            max_seconds=seconds,
            run_dir=run_dir + "/r",
            progress=False,
            tensorboard=False,
        )
        wall = time.perf_counter() - t0
    s = result.summary
    return {
        "system": NAMES[vectorizer],
        "workers": actors,
        "envs_per_worker": envs,
        "agent_steps": s["env_steps"],
        "frames_per_second": FRAME_SKIP * s["env_steps_per_second"],
        "frames_per_second_overall": FRAME_SKIP * s["env_steps"] / wall,
        "learner_samples_per_second": s["env_steps"] / max(s["learn_seconds"], 1e-9),
        "wall_seconds": wall,
    }


_SF_REPORT = re.compile(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[\d+\] Fps is .*?Total num frames: (\d+)"
)


def sf_frames_per_second(log: str) -> tuple[float, list[tuple[float, int]]]:
    """Steady frames/s from Sample Factory's ``Total num frames`` reports: the frames added
    between the first report that shows the counter moved and the last one that does, over the
    time between the two (each comes within one 5 s report interval after a training iteration
    ended). nan if the counter did not move at least twice."""
    reports = [
        (datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(f))
        for t, f in _SF_REPORT.findall(log)
    ]
    moved = [i for i in range(1, len(reports)) if reports[i][1] > reports[i - 1][1]]
    if len(moved) < 2:
        return float("nan"), reports
    (t1, f1), (t2, f2) = reports[moved[0]], reports[moved[-1]]
    return (f2 - f1) / (t2 - t1), reports


def sample_factory_run(
    python: str, seconds: float, workers: int, envs: int, startup: float
) -> dict:
    """Runs Sample Factory's Atari example through benchmarks/baselines/sf_atari.py (which makes
    it start here: see its docstring) and stops it ``seconds`` after training began."""
    with tempfile.TemporaryDirectory() as train_dir:
        cmd = [
            python,
            str(HERE / "baselines/sf_atari.py"),
            "--env=atari_breakout",
            "--experiment=bench",
            f"--train_dir={train_dir}",
            f"--num_workers={workers}",
            f"--num_envs_per_worker={envs}",
            "--async_rl=True",
            "--device=cpu",
            "--save_every_sec=100000",
            f"--train_for_seconds={int(seconds * 4)}",  # a backstop; the benchmark stops it
        ]
        log_path = Path(train_dir) / "stdout.log"
        t0 = time.perf_counter()
        with open(log_path, "w") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            began = None  # when the frame counter first moved
            while proc.poll() is None:
                time.sleep(1.0)
                now = time.perf_counter()
                if began is None:
                    _, reports = sf_frames_per_second(log_path.read_text(errors="replace"))
                    if any(f > 0 for _, f in reports):
                        began = now
                    elif now - t0 > startup:
                        break
                elif now - began > seconds:
                    break
            _stop(proc)
        wall = time.perf_counter() - t0
        log = log_path.read_text(errors="replace")
    fps, reports = sf_frames_per_second(log)
    row = {"system": NAMES["sf"], "workers": workers, "envs_per_worker": envs}
    if fps != fps:  # nan
        why = "no training within --sf-startup" if began is None else "too few frame reports"
        return {**row, "error": f"{why}; log tail: {log[-1500:]}"}
    frames = reports[-1][1]
    return {
        **row,
        "frames": frames,
        "frames_per_second": fps,
        "frames_per_second_overall": frames / wall,
        "startup_seconds": (began - t0) if began else None,
        "wall_seconds": wall,
    }


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to Sample Factory's session (it shuts its workers down on it), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def sb3_run(python: str, seconds: float, envs: int) -> dict:
    script = str(HERE / "baselines/sb3_ppo_atari.py")
    cmd = [python, script, f"--seconds={seconds}", f"--envs={envs}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 240)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"system": NAMES["sb3"], "error": (proc.stdout + proc.stderr)[-1500:]}
    row = json.loads(lines[-1])
    return {**row, "system": NAMES["sb3"], "workers": 1, "envs_per_worker": envs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seconds", type=float, default=60.0, help="training time per system, after warm-up"
    )
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1, help="alternate the systems this many times")
    p.add_argument("--sf-python", default=str(HERE / ".venvs/sf/bin/python"))
    p.add_argument(
        "--sf-startup",
        type=float,
        default=240.0,
        help="give up on Sample Factory if "
        "it has not trained by then (its start-up took 75 s on this loaded machine)",
    )
    p.add_argument("--sb3-python", default=str(HERE / ".venvs/sb3/bin/python"))
    p.add_argument("--systems", default="gymnasium,envpool,sf,sb3")
    args = p.parse_args()
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in NAMES]
    if unknown:
        sys.exit(f"--systems: unknown {unknown}; choose from {','.join(NAMES)}")
    figures: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(args.rounds):
        for system in systems:
            if system in ("sf", "sb3"):
                python = args.sf_python if system == "sf" else args.sb3_python
                if not Path(python).exists():
                    missing = f"no {python} (benchmarks/baselines/setup.sh)"
                    row = {"system": NAMES[system], "error": missing}
                elif system == "sf":
                    row = sample_factory_run(
                        python, args.seconds, args.actors, args.envs, args.sf_startup
                    )
                else:
                    row = sb3_run(python, args.seconds, args.envs)
            else:
                row = asyncrl_run(system, args.seconds, args.actors, args.envs)
            print(json.dumps(row), flush=True)
            if "frames_per_second" in row:
                figures[system].append(row["frames_per_second"])
    med = {s: statistics.median(v) for s, v in figures.items() if v}
    print(
        f"\nBreakout frames/s (median of {args.rounds} round(s), "
        f"{args.seconds:.0f} s each after warm-up)"
    )
    for s in systems:
        print(f"  {NAMES[s]:28s} {med[s]:8.0f}" if s in med else f"  {NAMES[s]:28s}   failed")
    for base in ("sf", "sb3"):
        if base not in med:
            continue
        for s in ("gymnasium", "envpool"):
            if s in med:
                print(f"  asyncrl ({s}) / {NAMES[base]}: {med[s] / med[base]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
