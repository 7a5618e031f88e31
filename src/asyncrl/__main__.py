"""``python -m asyncrl``: the same command line as the ``asyncrl`` script."""

from asyncrl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
