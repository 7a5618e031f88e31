"""Write the frame replay that tests/replay/test_frames.py loads as one saved before rollouts
ended in open rows (63a1706: a stream's observation after its rollout was kept apart, as
``pending``). Never rewrite it; it was written with that version's code::

    git archive 63a1706 src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src:tests/replay python tests/data/replay/make.py tests/data/replay
"""

from __future__ import annotations

import sys
from pathlib import Path

from test_frames import old_replay_inserts

from asyncrl.rundir import save_checkpoint

if __name__ == "__main__":
    buf, _ = old_replay_inserts()
    out = Path(sys.argv[1]) / "frames-63a1706"
    out.mkdir(parents=True)
    save_checkpoint(out, {"replay": buf.state_dict()})
