"""Experiment tracking on Weights & Biases (``--wandb``; docs: Guides, experiment tracking).

A run's W&B run gets what its run directory gets: the resolved config, every metrics row (the
scalars TensorBoard gets, under the same names), the evaluations and the summary. ``env_steps``
is logged in every row and is the x-axis of every chart, rather than W&B's own step: that one
may only grow, and an evaluation is logged at the env steps of the weights it evaluated, behind
the training rows logged meanwhile.

The wandb package is an extra: it is imported here only, when a run asks for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.config import ConfigError

if TYPE_CHECKING:
    from asyncrl.config import Settings

STEP = "env_steps"  # the x-axis of every chart


class Tracker:
    """The W&B run of one asyncrl run (``run_dir``), new or, with the ``run_id`` of an earlier
    one, continued (W&B's ``resume="allow"``); settings from ``cfg``'s ``wandb_*``. W&B keeps
    its local files in ``run_dir/wandb`` unless ``WANDB_DIR`` says elsewhere. End it with
    :meth:`finish`."""

    def __init__(self, cfg: Settings, run_dir: Path, run_id: str | None = None):
        import wandb

        try:
            self.run = wandb.init(
                project=cfg.wandb_project,
                entity=cfg.wandb_entity or None,
                group=cfg.wandb_group or None,
                tags=list(cfg.wandb_tags) or None,
                name=cfg.wandb_name or run_dir.name,
                id=run_id,
                resume="allow",
                config=cfg.to_dict(),
                dir=None if os.environ.get("WANDB_DIR") else str(run_dir),
                reinit="create_new",  # a W&B run of the caller's own stays as it is
            )
        except wandb.Error as e:  # not logged in, no network, a bad entity
            raise ConfigError(
                f"wandb: W&B could not start the run: {e} (log in with `wandb login`, or keep "
                "it on this machine with WANDB_MODE=offline)"
            ) from None
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)

    @property
    def identity(self) -> dict[str, Any] | None:
        """Where the run is: what a resumed run or an evaluation needs to go on in it (None
        with ``WANDB_MODE=disabled``: there is no run)."""
        if self.run.disabled:
            return None
        return {"id": self.run.id, "project": self.run.project, "entity": self.run.entity}

    def log(self, step: int, values: dict[str, Any]) -> None:
        """One row of ``values`` at ``step`` env steps."""
        self.run.log({STEP: step, **values})

    def video(self, path: str | Path) -> Any:
        """An animated GIF (``asyncrl eval --video``) as W&B media, to log in a row."""
        import wandb

        return wandb.Video(str(path), format="gif")

    def summary(self, values: dict[str, Any]) -> None:
        """The run's summary (summary.json) as the W&B run's summary."""
        self.run.summary.update(values)

    def finish(self, exit_code: int) -> None:
        """Flush and close the run; a non-zero ``exit_code`` marks it failed in W&B."""
        self.run.finish(exit_code=exit_code)
