"""Linear schedules over a run's env steps (learning rate, PPO's clip, DQN's exploration), and
how they go on without a jump when a run is resumed with another ``total_steps``."""

from __future__ import annotations


def linear(start: tuple[int, float], total_steps: int, env_steps: int) -> float:
    """The fraction left at ``env_steps`` of a leg that starts at ``start`` = (env steps,
    fraction there) and reaches 0 at ``total_steps``."""
    steps0, frac0 = start
    span = total_steps - steps0
    return 0.0 if span <= 0 else max(frac0 * (1.0 - (env_steps - steps0) / span), 0.0)


def continue_schedule(saved: dict, total_steps: int, env_steps: int) -> tuple[int, float]:
    """The leg of a run resumed at ``env_steps`` with ``total_steps``, from the leg ``saved`` in
    its checkpoint: that leg if the total is the same (a resumed run is the run that did not
    stop), else a new one from the fraction reached, ending at 0 at the new total -- never back
    up, as 1 - env_steps / total_steps would with a larger total."""
    leg = (int(saved["from_steps"]), float(saved["from_remaining"]))
    if int(saved["total_steps"]) == total_steps:
        return leg
    return env_steps, linear(leg, int(saved["total_steps"]), env_steps)


def schedule_state(leg: tuple[int, float], total_steps: int) -> dict:
    """What a checkpoint keeps of a leg (see :func:`continue_schedule`)."""
    return {"from_steps": leg[0], "from_remaining": leg[1], "total_steps": total_steps}
