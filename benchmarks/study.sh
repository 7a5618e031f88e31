#!/usr/bin/env bash
# The measured study behind docs/benchmarks/when-async-helps.md: `asyncrl compare` (sync vs async over K,
# N = 2 actors) on four envs, one run after another, then one `asyncrl tune` probe table.
#
#   bash benchmarks/study.sh              # everything, ~45 minutes on 2 cores
#   bash benchmarks/study.sh cartpole     # one env (cartpole, halfcheetah, humanoid, bullet, tune)
#
# Results go to benchmarks/results/study/<name>/ (compare.md, compare.csv, the PNG plots, and
# every run's own directory). Nothing else may run on the machine meanwhile: T and EPS are
# wall-clock figures, and runs that compete for the 2 cores measure the competition.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/study
mkdir -p "$OUT"
which="${1:-all}"

# PPO settings for the MuJoCo / PyBullet locomotion envs: normalised inputs, 64 steps per
# rollout, 4 epochs of minibatch 256 (learning and env stepping both take real time); no return
# normalisation, as docs/benchmarks/when-async-helps.md was measured (the mujoco preset would turn it on).
LOCO=(--actors 2 --rollout 64 --epochs 4 --minibatch-size 256 --norm-obs --no-norm-reward
      --gamma 0.99 --gae-lambda 0.95 --lr 3e-4 --steps 100000000 --no-progress --seed 1)

run() { [[ "$which" == all || "$which" == "$1" ]]; }

if run cartpole; then
  asyncrl compare --env CartPole-v1 --ks 8,16,32 --actors 2 --steps 150000 --minutes 2 \
    --target-return 475 --no-progress --seed 1 --out "$OUT/cartpole" --reuse
fi
if run halfcheetah; then
  asyncrl compare --env HalfCheetah-v5 --ks 8,16,32 "${LOCO[@]}" --minutes 1.5 \
    --target-return 1000 --out "$OUT/halfcheetah" --reuse
fi
if run humanoid; then
  asyncrl compare --env Humanoid-v5 --ks 8,16,32 "${LOCO[@]}" --minutes 1.5 \
    --target-return 400 --out "$OUT/humanoid" --reuse
fi
if run bullet; then
  asyncrl compare --env HumanoidBulletEnv-v0 --ks 8,16,32 "${LOCO[@]}" --minutes 2 \
    --target-return 0 --out "$OUT/bullet" --reuse
fi
if run tune; then
  rm -rf "$OUT/tune"
  asyncrl tune --env HalfCheetah-v5 --ns 1,2,3 --ks 8,16,32 --seconds 270 --rollout 64 \
    --epochs 4 --minibatch-size 256 --norm-obs --no-progress --out "$OUT/tune"
fi
