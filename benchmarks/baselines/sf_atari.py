"""Sample Factory 2.1.1's Atari example (``sf_examples.atari.train_atari``), made to start here.

Run it with the Sample Factory venv's python and the example's own flags. Why a wrapper: the
example makes ``BreakoutNoFrameskip-v4`` with ``gym.make`` but never imports ``ale_py``. Sample
Factory 2.1.1 was written against ale-py 0.8, which registered its ids through Gymnasium's plugin
entry point; ale-py 0.9 (the one that installs beside gymnasium 0.29 here) registers them only on
``import ale_py``. So the child Sample Factory spawns to read the env's spaces dies with
``NameNotFound: Environment `BreakoutNoFrameskip` doesn't exist`` and the parent waits for its
answer for ever, printing nothing more: that was the "hang". Importing ``ale_py`` at the top of
the main module fixes it in every process, because spawned children re-import ``__main__``.
"""

import sys

import ale_py  # noqa: F401  (registers the ALE ids, here and in every spawned child)
from sf_examples.atari.train_atari import main

if __name__ == "__main__":
    sys.exit(main())
