#!/usr/bin/env bash
# Virtual environments of the baselines the benchmarks compare against, each apart from asyncrl's
# own (Sample Factory 2.1.1 pins gymnasium<1.0; RLlib's Ray and its deps stay out of asyncrl's).
# Idempotent. torch is pinned to the CPU build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venvs="$here/../.venvs"
constraints="$here/../../constraints.txt"
mkdir -p "$venvs"
make_venv() {  # name, packages...
  local name=$1; shift
  if [ ! -x "$venvs/$name/bin/python" ]; then python3 -m venv "$venvs/$name"; fi
  "$venvs/$name/bin/pip" install --quiet -c "$constraints" torch==2.13.0 "$@"
  echo "$name: $("$venvs/$name/bin/pip" list 2>/dev/null | grep -iE '^(torch|stable.baselines3|sb3.contrib|sample.factory|ray|gymnasium|mujoco|pettingzoo) ' | tr -s ' ' | paste -sd ';')"
}
# Box2D: LunarLander and the other Box2D envs of benchmarks/defaults_generality.py; sb3-contrib:
# its RecurrentPPO beside the recurrent rows there (its release follows SB3's: the same 2.9), and
# its MaskablePPO on PettingZoo's connect four (benchmarks/baselines/sb3_maskable_c4.py, which
# plays its games with asyncrl's source on the path: asyncrl's config needs pyyaml)
make_venv sb3 'stable-baselines3==2.9.*' 'sb3-contrib==2.9.*' 'gymnasium[mujoco,box2d]>=1.1' ale-py \
  opencv-python-headless pettingzoo==1.27.0 pyyaml
[ "${1:-}" = sb3 ] && exit 0  # only SB3's (what defaults_generality.py needs)
make_venv sf sample-factory==2.1.1 'gymnasium[mujoco]<1.0'
# Sample Factory's Atari example: ale-py 0.9.1 is the last that works with gymnasium 0.29 (the
# constraints pin asyncrl's 0.12.1, hence outside them); benchmarks/baselines/sf_atari.py runs it
"$venvs/sf/bin/pip" install --quiet ale-py==0.9.1 opencv-python-headless
make_venv rllib 'ray[rllib]==2.60.0' 'gymnasium[mujoco]>=1.1'
