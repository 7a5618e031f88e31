"""asyncrl: actor-learner RL training measured for throughput."""

__version__ = "0.1.0"
