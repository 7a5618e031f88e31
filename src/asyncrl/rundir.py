"""The run directory: resolved config, checkpoints, metric logs and the summary.

Every file a run leaves is written to a temporary name in the same directory, flushed to disk
and renamed over the old one, and then the directory itself is flushed: a run killed -- or a
machine losing power -- at any moment leaves either the previous complete file or the new one,
never half of one, and a disk that fills up costs the new file, never the old.

Checkpoints are numbered: ``checkpoint-000001.pt``, ``checkpoint-000002.pt``, ... Each save
takes one more than the highest number in the directory, so the numbers order checkpoints by
when they were written, also across resumes (env steps would not: a run resumed from an older
checkpoint, because the newest was damaged, would write numbers below the damaged one, and
"newest" would keep meaning the damaged file). Only the newest ``keep_checkpoints`` are kept;
the older ones are what a damaged newest falls back to.

``checkpoint.pt`` is the newest checkpoint under the name ``asyncrl eval`` and older tools look
for: a hard link to the numbered file, made under a temporary name and renamed into place. A
link costs neither disk space nor time -- a checkpoint with a replay buffer can be many GB on a
disk that is nearly full -- and since no checkpoint file is ever changed in place, the two names
cannot disagree. On a filesystem without hard links it is a copy, written like every file here.

``checkpoint-best.pt`` (with ``--eval-every``) holds the policy that scored the best mean
return in the evaluations during training so far, with its evaluation: written like every
file here, replaced only by a better one, never numbered or pruned.

Every checkpoint holds the format it was written in (``format``: :data:`CHECKPOINT_FORMAT`),
and so does the run directory's marker (the newest format written there); a file or directory
without one is format 0, what asyncrl wrote before formats were numbered. Every format up to
:data:`CHECKPOINT_FORMAT` loads; a newer one is refused in one line naming both
(:func:`check_format`), before anything of the run starts.

Loading never runs code from the file: checkpoints are read with ``weights_only=True``, which
accepts tensors, numbers, strings and containers of them and refuses everything else -- on a
torch new enough for that to hold (:data:`SAFE_TORCH`); an older one is refused.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pickle
import re
import shutil
import socket
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.config import ConfigError
from asyncrl.core import NonFiniteError

if TYPE_CHECKING:
    from asyncrl.config import Settings

CONFIG = "config.yaml"
CHECKPOINT = "checkpoint.pt"
BEST_CHECKPOINT = "checkpoint-best.pt"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
POLICY_DIR = "policy_"  # a population's policy i: policy_<i>/ (its checkpoints)
EXPLOITS = "pbt.jsonl"  # PBT's exploits, one row each
WANDB_RUN = "wandb-run.json"  # the W&B run a --wandb run logs to: its resumptions go on there
MARKER = ".asyncrl-run"  # written with the config: --overwrite deletes only a marked run
LOCK = ".asyncrl.lock"  # flock'ed by the run using the directory, for its whole life
KEEP_CHECKPOINTS = 2  # TrainConfig.keep_checkpoints' default, for a state without a config
# The format checkpoints and run directories are written in: one more whenever this code could
# no longer write what an earlier version reads the same way. Every format up to it loads.
CHECKPOINT_FORMAT = 1
FORMAT_KEY = "format"
_MARKER_FORMAT = re.compile(r"^format (\d+)$", re.MULTILINE)

# weights_only=True is bypassable before torch 2.6 (CVE-2025-32434) and can corrupt memory
# before 2.10 (CVE-2026-24747)
SAFE_TORCH = (2, 10)

_NUMBERED = re.compile(r"^checkpoint-(\d+)\.pt$")
# what _atomic_write leaves behind if the process dies between writing and renaming
_POLICY = re.compile(rf"{POLICY_DIR}(0|[1-9][0-9]*)")  # policy_dir's names
_TEMP = re.compile(
    r"^\.(checkpoint(-\d+|-best)?\.pt|config\.yaml|summary\.json|metrics\.jsonl"
    r"|\.asyncrl-run)\.tmp\d+$"
)


class CheckpointReadError(OSError):
    """A checkpoint that is not damaged could not be read (out of memory, an I/O error). No
    older checkpoint is used in its place: falling back would resume from older work and drop
    the metrics written since, for a cause that passes."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error). Its temporary file is removed
    and the earlier checkpoints are untouched, so the caller may go on and try again later.
    ``errno`` is that of the failed write (``errno.ENOSPC`` for a full disk)."""


def default_run_dir(cfg: Settings, create: bool = False) -> Path:
    """``runs/<env>-<algo>-<mode>-<time>``, with ``-2``, ``-3``, ... appended if a run started
    in the same second already has that name: a default never points at another run.
    ``create``: make the directory too, exclusively (``mkdir`` fails on an existing one), so
    that two runs choosing at the same moment still get two directories."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    mode = f"hogwild{cfg.hogwild}-{cfg.sync_mode}" if cfg.hogwild else cfg.mode
    base = Path("runs") / f"{cfg.env}-{cfg.algo}-{mode}-{stamp}"
    path, n = base, 1
    while True:
        if create:
            base.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir()
                return path
            except FileExistsError:
                pass
        elif not path.exists():
            return path
        n += 1
        path = base.with_name(f"{base.name}-{n}")


def default_study_dir(kind: str, cfg: Settings) -> Path:
    """Where ``asyncrl compare`` / ``tune`` put their runs and tables unless told."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{kind}-{cfg.env.replace(':', '-')}-{cfg.algo}-{stamp}"


# ---------------------------------------------------------------------- claiming a directory
def holds_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds (part of) a run: its config, a checkpoint, metrics or summary."""
    run_dir = Path(run_dir)
    names = (CONFIG, CHECKPOINT, METRICS, SUMMARY)
    return any((run_dir / n).exists() for n in names) or bool(_numbered_checkpoints(run_dir))


def claim_run_dir(run_dir: str | Path, resume: bool, overwrite: bool) -> Path:
    """Make sure a run may write into ``run_dir``; call it before anything is written there.

    A directory that already holds a run is never written over by accident: without ``resume``
    (continue that run) or ``overwrite`` (start over) it is refused with a ConfigError naming
    both ways out. ``overwrite`` deletes only the files a run writes -- config.yaml, the
    checkpoints, metrics.jsonl, summary.json, tb/, pbt.jsonl, wandb-run.json (the next run
    starts a W&B run of its own) and a population's policy_<i>/ directories -- and leaves
    anything else there alone (a policy_notes.md too, and W&B's local files in wandb/); it
    refuses a directory without asyncrl's marker (:data:`MARKER`), whose files are not ours.
    Leftover temporary files of a killed run are removed in every case (they can be as large
    as a checkpoint and are never complete). Does not create the directory.
    """
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise ConfigError(
            f"overwrite: --overwrite would delete the run in {run_dir} that --resume continues; "
            "give one of them"
        )
    existing = holds_run(run_dir)
    if resume and not existing:
        raise ConfigError(f"run_dir: {run_dir} holds no run to resume")
    if existing and not resume:
        if not overwrite:
            raise ConfigError(
                f"run_dir: {run_dir} already holds a run; continue it with --resume {run_dir} "
                "or start over with --overwrite"
            )
        if not (run_dir / MARKER).is_file():
            raise ConfigError(
                f"run_dir: {run_dir} holds files that asyncrl did not mark as its run (no "
                f"{MARKER}), so --overwrite deletes nothing there; move them away or give "
                "another --run-dir"
            )
        for path in _run_files(run_dir):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    if run_dir.is_dir():
        for path in run_dir.iterdir():
            if _TEMP.match(path.name):
                path.unlink(missing_ok=True)
    return run_dir


@contextmanager
def run_dir_held(run_dir: str | Path, resume: bool, overwrite: bool) -> Iterator[Path]:
    """Hold ``run_dir`` for a run's life: an exclusive advisory lock (``flock``) on its
    :data:`LOCK` file, then :func:`claim_run_dir` under it. A second run of the same directory
    -- in this process, another, or on another host of a shared filesystem -- is refused in one
    line. The kernel drops the lock when the process ends, SIGKILL included. Creates the
    directory; a refused claim removes what it created."""
    run_dir = Path(run_dir)
    made = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    while True:
        try:
            fd, made_lock = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            fd, made_lock = os.open(path, os.O_RDWR), False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "starting"
            os.close(fd)
            raise ConfigError(
                f"run_dir: {run_dir} is in use by another run ({holder}); wait for it to end "
                "or give another --run-dir"
            ) from None
        # a refused claim may have removed the file between our open and our lock: lock the
        # file that is there now, not the removed one
        try:
            here = os.stat(path)
        except FileNotFoundError:
            here = None
        held = os.fstat(fd)
        if here is not None and (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)
    try:
        try:
            claim_run_dir(run_dir, resume=resume, overwrite=overwrite)
        except BaseException:
            if made_lock:
                path.unlink(missing_ok=True)
            if made:
                with suppress(OSError):  # only if empty: never delete what is not ours
                    run_dir.rmdir()
            raise
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        holder = f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder, 0)
        yield run_dir
    finally:
        os.close(fd)  # releases the lock


def policy_dir(run_dir: str | Path, policy: int) -> Path:
    """Where policy ``policy`` of a population run keeps its checkpoints (numbered, rotated and
    linked as the run's own are)."""
    return Path(run_dir) / f"{POLICY_DIR}{policy}"


def policy_folders(policies: int) -> bool:
    """Whether a run of ``policies`` policies keeps each one's checkpoints in a folder of its
    own (:func:`policy_dir`) beside the run's: a population does; one policy's are the run's."""
    return policies > 1


def policy_of(directory: Path) -> int | None:
    """The policy whose checkpoints ``directory`` holds (a population's ``policy_<i>``), or
    None."""
    match = _POLICY.fullmatch(directory.name)
    return int(match.group(1)) if match else None


def _run_files(run_dir: Path) -> list[Path]:
    names = (
        CONFIG, CHECKPOINT, BEST_CHECKPOINT, METRICS, SUMMARY, TENSORBOARD, MARKER, EXPLOITS,
        WANDB_RUN,
    )  # fmt: skip
    # a population's policy_<i>/ directories, not whatever else a user named policy_*
    policies = [p for p in run_dir.glob(f"{POLICY_DIR}*") if _POLICY.fullmatch(p.name)]
    named = [run_dir / n for n in names] + sorted(p for p in policies if p.is_dir())
    return [p for p in named if p.exists() or p.is_symlink()] + [
        p for _, p in _numbered_checkpoints(run_dir)
    ]


# ---------------------------------------------------------------------- writing files
def _fsync_dir(path: Path) -> None:
    """Make renames in ``path`` durable: a new directory entry is on disk once its directory is
    synced, not when the file's data is."""
    if os.name == "nt":  # a directory cannot be opened there; NTFS journals its renames
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """``write`` fills a temporary file beside ``path``; its data is flushed to disk, then it
    is renamed to ``path`` and the directory flushed. On any failure the temporary file is
    removed and the old ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "r+b") as f:  # writable: Windows will not flush a read-only handle
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class _WriteWatch:
    """The file torch.save writes through, remembering the OSError of a failed write: torch
    reports it as a RuntimeError about stream positions, and the caller needs the errno."""

    def __init__(self, f: Any):
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _torch_save(state: dict[str, Any], path: Path) -> None:
    with open(path, "wb") as f:
        out = _WriteWatch(f)
        try:
            torch.save(state, out)
        except Exception as e:
            # Ctrl+C while torch writes: its zip writer's cleanup then fails on the half-written
            # stream and raises a RuntimeError of its own in place of the interrupt
            cause = e.__context__
            while cause is not None and not isinstance(cause, KeyboardInterrupt):
                cause = cause.__context__
            if cause is not None:
                raise cause from None
            if out.error is None:
                raise
            raise OSError(out.error.errno, out.error.strerror, str(path)) from e


def _weights_only_safe(value: Any) -> Any:
    """``value`` in the types ``torch.load(weights_only=True)`` accepts: tensors, Python
    numbers and strings, and dicts, lists and tuples of them.

    A learner's state holds numpy arrays (the replay buffer) and may hold numpy scalars; the
    weights-only loader refuses both, so they become tensors (sharing memory, no copy) and
    Python numbers here, and learners need not know. ``ReplayBuffer.load_state_dict`` reads a
    tensor as it read the array (``np.asarray``). Containers are rebuilt only where something
    in them changed: a module's state dict keeps its type and version metadata.
    """
    if isinstance(value, np.ndarray):
        try:
            return torch.from_numpy(np.ascontiguousarray(value))
        except TypeError:  # a dtype torch has no tensor of (strings, objects)
            return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        safe = {k: _weights_only_safe(v) for k, v in value.items()}
        if all(safe[k] is v for k, v in value.items()):
            return value
        return safe
    if isinstance(value, list | tuple):
        safe = [_weights_only_safe(v) for v in value]
        if all(s is v for s, v in zip(safe, value, strict=True)):
            return value
        return type(value)(safe) if type(value) in (list, tuple) else safe
    return value


def _stamped(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as a checkpoint file holds it: loadable weights-only, with its format."""
    return {**_weights_only_safe(state), FORMAT_KEY: CHECKPOINT_FORMAT}


def check_format(found: Any, what: str) -> None:
    """Refuse, in one line, ``what`` (a file or run directory, as the line names it) written
    in format ``found`` (None: before formats, 0) if this code does not know that format."""
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise ConfigError(f"checkpoint: {what} holds format {found!r}, not a format number")
    if found > CHECKPOINT_FORMAT:
        raise ConfigError(
            f"checkpoint: {what} is checkpoint format {found}; this asyncrl reads formats up to "
            f"{CHECKPOINT_FORMAT} (upgrade asyncrl)"
        )


def run_dir_format(run_dir: str | Path) -> int:
    """The format its marker names (the newest written in ``run_dir``); 0 without one."""
    try:
        text = (Path(run_dir) / MARKER).read_text(errors="replace")
    except OSError:  # no marker (a run from before it, or files copied without it)
        return 0
    m = _MARKER_FORMAT.search(text)
    return int(m.group(1)) if m else 0


def check_run_dir_format(run_dir: str | Path) -> None:
    """Refuse, in one line, a run directory a newer asyncrl has written in."""
    check_format(run_dir_format(run_dir), f"{run_dir} (run directory)")


def nonfinite_weights(state: dict[str, Any]) -> list[str]:
    """Names of the float tensors under ``state``'s ``learner`` (its replay left out) and
    ``policy`` -- the networks, their optimizers and statistics -- that hold a NaN or inf."""
    found: list[str] = []

    def walk(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                found.append(name)
        elif isinstance(value, dict):
            for k, v in value.items():
                if k != "replay":
                    walk(v, f"{name}/{k}")
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{name}/{i}")

    for key in ("learner", "policy"):
        walk(state.get(key), key)
    return found


def _refuse_nonfinite(state: dict[str, Any], path: Path) -> None:
    bad = nonfinite_weights(state)
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise NonFiniteError(
            f"checkpoint {path.name} not written: {', '.join(bad[:3])}{more} hold NaN or inf"
        )


def save_checkpoint(run_dir: str | Path, state: dict[str, Any], keep: int | None = None) -> Path:
    """Write ``state`` as the next numbered checkpoint, point ``checkpoint.pt`` at it and delete
    all but the newest ``keep``; returns the new file's path.

    ``keep`` defaults to ``state["config"]["keep_checkpoints"]`` (the trainer saves the config
    in every checkpoint), else 2. Raises :class:`CheckpointWriteError` if the checkpoint could
    not be written -- the disk is full, say; nothing of it is left behind and the earlier
    checkpoints are untouched, so training may go on and try again at the next period.
    Raises :class:`NonFiniteError`, writing and deleting nothing, if the networks hold a NaN
    or inf (:func:`nonfinite_weights`): the checkpoints kept are never replaced by such ones.
    """
    run_dir = Path(run_dir)
    if keep is None:
        keep = int((state.get("config") or {}).get("keep_checkpoints", KEEP_CHECKPOINTS))
    if keep < 1:
        raise ConfigError(f"keep_checkpoints: must be >= 1, got {keep}")
    safe = _stamped(state)
    existing = _numbered_checkpoints(run_dir)
    number = existing[0][0] + 1 if existing else 1
    path = run_dir / f"checkpoint-{number:06d}.pt"
    _refuse_nonfinite(state, path)
    try:
        _atomic_write(path, lambda p: _torch_save(safe, p))
        _point_newest_at(path)
    except OSError as e:
        raise CheckpointWriteError(
            e.errno, f"checkpoint not written: {e.strerror or e}", str(path)
        ) from e
    for _, old in existing[keep - 1 :]:
        try:
            old.unlink(missing_ok=True)
        except OSError as e:  # the new checkpoint is safe; an old one left over is no loss
            print(f"asyncrl: warning: could not delete old checkpoint {old}: {e}", file=sys.stderr)
    return path


def save_best_checkpoint(run_dir: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` as ``checkpoint-best.pt`` in place of the one before, atomically (see the
    module doc); raises :class:`CheckpointWriteError` as :func:`save_checkpoint` does, leaving
    the earlier best as it was."""
    path = Path(run_dir) / BEST_CHECKPOINT
    _refuse_nonfinite(state, path)
    safe = _stamped(state)
    try:
        _atomic_write(path, lambda p: _torch_save(safe, p))
    except OSError as e:
        raise CheckpointWriteError(
            e.errno, f"checkpoint not written: {e.strerror or e}", str(path)
        ) from e
    return path


def _point_newest_at(path: Path) -> None:
    newest = path.with_name(CHECKPOINT)
    tmp = path.with_name(f".{CHECKPOINT}.tmp{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        os.link(path, tmp)
        os.replace(tmp, newest)
    except OSError:  # no hard links here (FAT, some network filesystems): a copy then
        tmp.unlink(missing_ok=True)
        _atomic_write(newest, lambda p: shutil.copyfile(path, p))
        return
    _fsync_dir(path.parent)


def _numbered_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(number, path) of the numbered checkpoints in ``run_dir``, newest first."""
    if not run_dir.is_dir():
        return []
    found = []
    for path in run_dir.iterdir():
        m = _NUMBERED.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found, reverse=True)


def checkpoint_files(run_dir: str | Path) -> list[Path]:
    """The checkpoints of ``run_dir`` in the order :func:`load_checkpoint` tries them: numbered
    ones newest first, then ``checkpoint.pt`` unless it is one of those (a run from before
    numbered checkpoints has only that)."""
    run_dir = Path(run_dir)
    numbered = [p for _, p in _numbered_checkpoints(run_dir)]
    newest = run_dir / CHECKPOINT
    if newest.is_file() and not any(_same_file(newest, p) for p in numbered):
        numbered.append(newest)
    return numbered


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# ---------------------------------------------------------------------- reading files
def _check_torch() -> None:
    """Refuse, in one line, a torch on which ``weights_only=True`` does not keep code out."""
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if version < SAFE_TORCH:
        raise ConfigError(
            f"torch: {torch.__version__} cannot load a checkpoint safely (its weights-only "
            "loader can run code or corrupt memory: CVE-2025-32434, CVE-2026-24747); "
            "install torch>=2.10"
        )


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The newest checkpoint of ``run_dir`` that loads.

    One that is damaged (truncated, corrupt, or holding anything but tensors and plain data)
    is reported in one line on stderr and the next older one is tried; if none loads, or there
    is none, a ConfigError names the run directory. One that is intact but cannot be read (out
    of memory, an I/O error) raises :class:`CheckpointReadError`. Nothing in a file is ever run
    as code.
    """
    return load_checkpoint_file(run_dir)[0]


def load_checkpoint_file(run_dir: str | Path) -> tuple[dict[str, Any], Path]:
    """:func:`load_checkpoint`, and the file it loaded."""
    _check_torch()
    run_dir = Path(run_dir)
    files = checkpoint_files(run_dir)
    if not files:
        raise ConfigError(f"run_dir: {run_dir} holds no checkpoint to resume or evaluate from")
    for i, path in enumerate(files):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise ValueError(f"holds a {type(state).__name__}, not a checkpoint's mapping")
        except Exception as e:
            if not _damaged(path, e):
                raise CheckpointReadError(
                    getattr(e, "errno", None) or errno.EIO,
                    f"checkpoint {path} could not be read ({_why(e)}); it is not damaged, so no "
                    "older checkpoint is used in its place: try again once that is fixed",
                ) from e
            then = f"falling back to {files[i + 1].name}" if i + 1 < len(files) else "none older"
            print(
                f"asyncrl: warning: checkpoint {path} does not load ({_why(e)}); {then}",
                file=sys.stderr,
            )
            continue
        # a newer format is refused, not passed over: an older checkpoint would drop its work
        check_format(state.get(FORMAT_KEY, 0), str(path))
        return state, path
    tried = ", ".join(f.name for f in files)
    raise ConfigError(f"run_dir: {run_dir} holds no checkpoint that loads (tried {tried})")


def load_best_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """``checkpoint-best.pt`` of ``run_dir``; a ConfigError if there is none or it does not
    load (there is no older one to fall back to: the latest checkpoint is another policy)."""
    path = Path(run_dir) / BEST_CHECKPOINT
    if not path.is_file():
        raise ConfigError(
            f"checkpoint: {run_dir} holds no {BEST_CHECKPOINT} (a run keeps one when it "
            "evaluates during training: --eval-every)"
        )
    return load_checkpoint_at(path)


def load_checkpoint_at(path: Path) -> dict[str, Any]:
    """The checkpoint file ``path`` (one named by the user: no other is tried in its place);
    a ConfigError naming it if it does not load."""
    _check_torch()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"holds a {type(state).__name__}, not a checkpoint's mapping")
    except Exception as e:
        raise ConfigError(f"checkpoint: {path} does not load ({_why(e)})") from e
    check_format(state.get(FORMAT_KEY, 0), str(path))
    return state


def _damaged(path: Path, e: Exception) -> bool:
    """Whether ``e``, raised loading ``path``, says the file is bad rather than that reading it
    failed (memory, I/O). Torch raises a RuntimeError for a corrupt archive and for an
    allocation that failed alike: then the archive's own checksums decide."""
    if isinstance(e, pickle.UnpicklingError | EOFError | ValueError):
        return True
    if not isinstance(e, RuntimeError):  # MemoryError, OSError, ...
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is not None
    except (zipfile.BadZipFile, EOFError):
        return True
    except (OSError, MemoryError):
        return False


def _why(e: Exception) -> str:
    """One line on why a checkpoint did not load (torch's messages run to paragraphs)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if isinstance(e, pickle.UnpicklingError):
        # torch names the refused object on a line of its own ("... unsupported GLOBAL x ...")
        detail = next((line for line in lines if "GLOBAL" in line or "nsupported" in line), "")
        return "it holds more than tensors and plain data; loading it could run code" + (
            f": {detail.rstrip('.')}" if detail else ""
        )
    first = lines[0] if lines else "no detail"
    # torch's allocator: "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: ..."
    first = re.sub(r"^\[enforce fail at [^\]]*\] [^.]*\. ", "", first).split(". ")[0]
    return f"{type(e).__name__}: {first[:200]}"


def restore_learner(run_dir: Path, learner: Any) -> tuple[dict[str, Any], Path]:
    """Load the newest checkpoint that loads into ``learner``; returns the whole checkpoint
    (its ``wall_seconds`` continue a resumed run's clock) and the file it came from."""
    state, path = load_checkpoint_file(run_dir)
    learner.load_state_dict(state["learner"])
    return state, path


def save_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    text = json.dumps(summary, indent=2) + "\n"
    _atomic_write(run_dir / SUMMARY, lambda p: p.write_text(text))


def load_wandb_run(run_dir: str | Path) -> dict[str, Any] | None:
    """The W&B run that ``run_dir``'s run logs to (its id, project and entity), or None."""
    path = Path(run_dir) / WANDB_RUN
    return json.loads(path.read_text()) if path.is_file() else None


def save_wandb_run(run_dir: str | Path, run: dict[str, Any]) -> None:
    text = json.dumps(run, indent=2) + "\n"
    _atomic_write(Path(run_dir) / WANDB_RUN, lambda p: p.write_text(text))


def save_config(run_dir: Path, cfg: Settings) -> None:
    """Write the run's config, and the marker that makes the directory an asyncrl run's and
    names the format it is written in (a run resumed from an older format is this one now)."""
    _atomic_write(run_dir / CONFIG, cfg.save)
    if not (run_dir / MARKER).is_file() or run_dir_format(run_dir) != CHECKPOINT_FORMAT:
        text = f"an asyncrl run directory\nformat {CHECKPOINT_FORMAT}\n"
        _atomic_write(run_dir / MARKER, lambda p: p.write_text(text))
