"""Sample Factory 2.1.1 APPO on HalfCheetah with its own MuJoCo defaults; prints one JSON line.

Runs in its own venv (Sample Factory pins gymnasium<1.0, so HalfCheetah-v4 there): rollout 64,
batch 1024 x 4 batches per epoch x 2 epochs, 64x64 tanh MLP, normalised inputs and returns,
2 workers x 8 envs. ``env_steps_per_second`` is the median of Sample Factory's own 10-second FPS
reports after the first (start-up excluded, like asyncrl's figure); ``overall`` is its final
"Collected ..., FPS" line, start-up included.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200_000)
p.add_argument("--async-rl", default="True", choices=["True", "False"])
p.add_argument("--num-workers", type=int, default=2)
p.add_argument("--num-envs-per-worker", type=int, default=8)
args = p.parse_args()

with tempfile.TemporaryDirectory() as train_dir:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sf_examples.mujoco.train_mujoco",
            "--env=mujoco_halfcheetah",
            "--experiment=bench",
            f"--train_dir={train_dir}",
            f"--num_workers={args.num_workers}",
            f"--num_envs_per_worker={args.num_envs_per_worker}",
            f"--async_rl={args.async_rl}",
            f"--train_for_env_steps={args.steps}",
            "--device=cpu",
            "--save_every_sec=100000",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
log = proc.stdout + proc.stderr
if proc.returncode != 0:
    sys.exit(f"sample factory failed:\n{log[-3000:]}")
windows = [float(x) for x in re.findall(r"Fps is \(10 sec: ([0-9.]+)", log)]
overall = [float(x) for x in re.findall(r"Collected \{0: \d+\}, FPS: ([0-9.]+)", log)]
steady = statistics.median(windows[1:] or windows)
print(
    json.dumps(
        {
            "impl": "sample-factory",
            "mode": "async" if args.async_rl == "True" else "sync",
            "env_steps": args.steps,
            "env_steps_per_second": steady,
            "fps_windows": windows,
            "overall": overall[-1] if overall else None,
        }
    )
)
