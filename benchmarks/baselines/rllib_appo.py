"""RLlib 2.60 APPO (new API stack) on HalfCheetah-v5 with part d's settings; prints one JSON line.

Runs in its own venv (benchmarks/baselines/setup.sh): a local Ray bound to loopback, 2 EnvRunner
actors x 8 envs (gymnasium's sync vector env) with rollout fragments of 64, so each sample()
returns 8 x 64 = 512 env steps; one Learner in the driver (num_learners=0, CPU, one torch
thread); each update trains on 512 samples (train_batch_size_per_learner, one EnvRunner's
sample, as asyncrl async trains on one actor's 512-sample rollout) in 2 epochs of minibatches
of 512 (but see below); 64x64 tanh MLPs, separate policy and value nets, state-independent log-std;
observations mean-std filtered by RLlib's MeanStdFilter env-to-module connector (its stats
merged across EnvRunners at each weight sync). APPO's circular buffer (each batch drawn up to K
times at random, the oldest dropped when full) is replaced by RLlib's plain queue, so that each
sample is trained on exactly num_epochs = 2 times, as in asyncrl, and none is dropped. gamma
0.99, lr 3e-4, V-trace lambda 0.95, clip 0.2, no entropy bonus, gradient norm clipped at 0.5.

Not quite 2 gradient steps per 512 samples: APPO's learner connector adds one bootstrap row per
episode chunk, so an update's batch holds ~520 rows for 512 env steps, and RLlib's cyclic
minibatch iterator needs 3 minibatches of 512 to cover it twice (``trained_per_sampled`` ~3, not
2): 1.5x asyncrl's learner work per sample. ``--minibatch 0`` (one minibatch of the whole batch
per epoch) gives exactly 2 gradient steps per update.

Timing: ``algo.train()`` is called until ``env_runners/num_env_steps_sampled_lifetime`` (the
lifetime count of env steps the EnvRunners sampled, the number ``env_steps`` reports) reaches
``--steps``; each call lasts at least ``--iteration-seconds`` (RLlib's
min_time_s_per_iteration; IMPALA's default of 10 s would leave few calls in a short run).
``env_steps_per_second`` is (steps at the end - steps at the end of the first train() call that
brought any samples) / (seconds between those two points): Ray's and the actors' start-up, env
and torch warm-up and the first samples are excluded, as for asyncrl's figure (from the end of
its first training iteration on) and Sample Factory's (its first 10-second report dropped). The
first call can return before any EnvRunner has sampled, so it is the first call with samples,
not simply the first call, that closes the start-up. ``overall`` is all env steps over the wall
time from before ``ray.init`` to the end, start-up included.
"""

import argparse
import json
import os
import time

import ray
import torch
from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.connectors.env_to_module import MeanStdFilter
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=102_400)
p.add_argument("--env", default="HalfCheetah-v5")
p.add_argument("--num-env-runners", type=int, default=2)
p.add_argument("--num-envs-per-env-runner", type=int, default=8)
p.add_argument("--rollout", type=int, default=64, help="rollout_fragment_length, per env")
p.add_argument("--train-batch", type=int, default=512, help="train_batch_size_per_learner")
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--minibatch", type=int, default=512, help="0: the whole batch (None to RLlib)")
p.add_argument("--iteration-seconds", type=float, default=2.0)
p.add_argument("--no-norm-obs", action="store_true")
args = p.parse_args()
minibatch = args.minibatch or None

torch.set_num_threads(1)  # the learner's, as asyncrl's threads_learner=1
settings = {
    "env": args.env,
    "num_env_runners": args.num_env_runners,
    "num_envs_per_env_runner": args.num_envs_per_env_runner,
    "rollout_fragment_length": args.rollout,
    "train_batch_size_per_learner": args.train_batch,
    "num_epochs": args.epochs,
    "minibatch_size": minibatch,
    "use_circular_buffer": False,
    "norm_obs": not args.no_norm_obs,
    "fcnet_hiddens": [64, 64],
    "fcnet_activation": "tanh",
    "num_learners": 0,
    "min_time_s_per_iteration": args.iteration_seconds,
}

t_start = time.perf_counter()
ray.init(
    num_cpus=args.num_env_runners + 1,  # one per EnvRunner actor, one for the driver's Learner
    num_gpus=0,
    include_dashboard=False,
    _node_ip_address="127.0.0.1",
    # as asyncrl's own local instance: env runners at the driver's priority, not Ray's nice 15
    # (which would starve them whenever the learner trains on this 2-core machine)
    _system_config={"worker_niceness": 0},
)
algo = None
try:
    config = (
        APPOConfig()
        .environment(args.env)
        .framework("torch")
        .env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.num_envs_per_env_runner,
            rollout_fragment_length=args.rollout,
            num_cpus_per_env_runner=1,
            num_gpus_per_env_runner=0,
            env_to_module_connector=(
                None if args.no_norm_obs else (lambda env, spaces, device: MeanStdFilter())
            ),
        )
        .learners(num_learners=0, num_gpus_per_learner=0)
        .training(
            train_batch_size_per_learner=args.train_batch,
            num_epochs=args.epochs,
            minibatch_size=minibatch,
            lr=3e-4,
            gamma=0.99,
            lambda_=0.95,
            clip_param=0.2,
            entropy_coeff=0.0,
            vf_loss_coeff=0.5,
            grad_clip=0.5,
            grad_clip_by="global_norm",
            use_kl_loss=False,
            use_circular_buffer=False,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[64, 64],
                fcnet_activation="tanh",
                vf_share_layers=False,
                free_log_std=True,
            )
        )
        .reporting(min_time_s_per_iteration=args.iteration_seconds)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    t_built = time.perf_counter() - t_start

    def sampled(result: dict) -> int:
        # Algorithm copies env_runners/num_env_steps_sampled_lifetime to the top level, as 0
        # while no EnvRunner has returned a sample yet (the first calls, during warm-up)
        return int(result["num_env_steps_sampled_lifetime"])

    iterations = []  # (seconds since start, env steps sampled, env steps trained)
    while not iterations or iterations[-1][1] < args.steps:
        r = algo.train()
        trained = r.get("learners", {}).get("__all_modules__", {})
        iterations.append(
            (
                time.perf_counter() - t_start,
                sampled(r),
                int(trained.get("num_env_steps_trained_lifetime", 0)),
            )
        )
    # the steady window opens at the end of the first call that brought samples
    first = next(i for i, it in enumerate(iterations) if it[1] > 0)
    (t1, s1, _), (t_end, s_end, trained_end) = iterations[first], iterations[-1]
    returns = r["env_runners"].get("episode_return_mean")
finally:
    if algo is not None:
        algo.stop()
    ray.shutdown()

print(
    json.dumps(
        {
            "impl": "rllib",
            "algo": "appo",
            "ray": ray.__version__,
            "torch": torch.__version__,
            "env_steps": s_end,
            "env_steps_trained": trained_end,
            "trained_per_sampled": trained_end / s_end,
            "env_steps_per_second": (s_end - s1) / (t_end - t1) if t_end > t1 else None,
            "overall": s_end / t_end,
            "build_seconds": t_built,
            "first_train_end_seconds": t1,
            "seconds": t_end,
            "train_calls": len(iterations),
            "steady_train_calls": len(iterations) - 1 - first,
            "episode_return_mean": returns,
            "cpus": os.cpu_count(),
            **settings,
        }
    )
)
