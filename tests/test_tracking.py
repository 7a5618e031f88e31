"""``--wandb``: what a run gives Weights & Biases, read back from an offline W&B run's own log.

No network: every W&B test runs in ``WANDB_MODE=offline`` with W&B's home directories in the
test's tmp_path; W&B keeps the run's files in the run directory's ``wandb/``. The wandb SDK has
no reader of an offline run's ``run-<id>.wandb`` log, so :func:`records` reads it: the LevelDB
log format (32 KiB blocks of checksummed, possibly fragmented records) after W&B's 7-byte
header, each record one of the SDK's own ``wandb_internal_pb2.Record`` protobufs.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import asyncrl
from asyncrl.cli import main
from asyncrl.metrics import _tb_name
from asyncrl.runtime import evaluator

TINY = dict(
    env="CartPole-v1",
    backend="inline",
    actors=1,
    envs_per_actor=2,
    rollout=16,
    minibatch_size=16,
    epochs=1,
    total_steps=512,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline, its home directories in tmp_path, nothing that prompts or prints; W&B's
    service ends with the test (its settings are read once per process)."""
    wandb = pytest.importorskip("wandb")
    for name in [n for n in os.environ if n.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "wandb-home"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(home / var.lower()))
    yield
    wandb.teardown()


# ---------------------------------------------------------------- reading an offline run
def offline_runs(run_dir: Path) -> list[Path]:
    """The offline W&B runs in a run directory, oldest first (their names start with the time).
    W&B's service writes a run's log in the background, also after ``finish`` returned: it is
    ended first, which waits for it to write everything (as the end of a process does)."""
    import wandb

    wandb.teardown()
    return sorted(run_dir.glob("wandb/offline-run-*"))


def records(offline_run: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    (log,) = offline_run.glob("run-*.wandb")
    data = log.read_bytes()
    assert data[:4] == b":W&B", f"{log} is not a W&B log"
    block, header = 32768, 7
    out, pos, pending = [], 7, b""
    while pos + header <= len(data):
        if block - pos % block < header:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack_from("<IHB", data, pos)
        chunk = data[pos + header : pos + header + length]
        pos += header + length
        if kind == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk  # full, first | middle, last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def _values(items: Any) -> dict[str, Any]:
    """Items of a record as a dict; a media object's fields come one item each, under the
    nested keys (name, field)."""
    out: dict[str, Any] = {}
    for item in items:
        *path, last = [item.key] if item.key else list(item.nested_key)
        into = out
        for key in path:
            into = into.setdefault(key, {})
        into[last] = json.loads(item.value_json)
    return out


def run_record(recs: list[Any]) -> Any:
    return next(r.run for r in recs if r.WhichOneof("record_type") == "run")


def config(recs: list[Any]) -> dict[str, Any]:
    out = {}
    for r in recs:
        kind = r.WhichOneof("record_type")
        if kind in ("run", "config"):  # the config given to init, then any update
            out.update(_values((r.run.config if kind == "run" else r.config).update))
    out.pop("_wandb", None)
    return out


def history(recs: list[Any]) -> list[dict[str, Any]]:
    """The logged rows, without W&B's own keys (_step, _runtime, _timestamp)."""
    rows = []
    for r in recs:
        if r.WhichOneof("record_type") == "history":
            row = _values(r.history.item)
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
    return rows


def summary(recs: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in recs:
        if r.WhichOneof("record_type") == "summary":
            out.update(_values(r.summary.update))
    return out


def exit_code(recs: list[Any]) -> int:
    (code,) = [r.exit.exit_code for r in recs if r.WhichOneof("record_type") == "exit"]
    return code


def as_logged(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics.jsonl row as W&B gets it: its finite numbers, under TensorBoard's names."""
    out = {"env_steps": row["env_steps"]}
    for key, value in row.items():
        if key != "env_steps" and isinstance(value, int | float) and math.isfinite(value):
            out[_tb_name(key)] = value
    return out


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (summary.json holds NaN where a figure has no value)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- the tests
def test_an_offline_run_holds_the_config_every_metrics_row_and_the_summary(
    offline, tmp_path, monkeypatch
):
    # the evaluator runs at the lowest priority, which a loaded machine can starve past the end's
    # wait (seen: no row in 120 s at load 13); what is tested here is where its row goes
    monkeypatch.setattr(evaluator, "NICE", 0)
    run_dir = tmp_path / "run"
    result = asyncrl.train(
        **TINY,
        eval_every=256,
        eval_episodes=1,
        run_dir=str(run_dir),
        wandb=True,
        wandb_group="smoke",
        wandb_tags=["tiny", "cartpole"],
    )
    (offline_run,) = offline_runs(run_dir)  # W&B's files are in the run directory
    recs = records(offline_run)
    run = run_record(recs)
    stored = json.loads((run_dir / "wandb-run.json").read_text())
    assert run.run_id == stored["id"] and offline_run.name.endswith(stored["id"])
    assert (run.project, run.run_group) == ("asyncrl", "smoke")
    assert list(run.tags) == ["tiny", "cartpole"]
    assert run.display_name == "run"  # the run directory's name
    assert config(recs) == yaml.safe_load((run_dir / "config.yaml").read_text())

    rows = metrics_rows(run_dir)
    assert any("eval/mean_return" in r for r in rows), "the run made no evaluation row"
    assert history(recs) == [as_logged(r) for r in rows]

    kept = summary(recs)
    written = json.loads((run_dir / "summary.json").read_text())
    assert written == result.summary
    assert {k: v for k, v in written.items() if not same(kept.get(k), v)} == {}
    assert exit_code(recs) == 0


def test_a_resumed_run_goes_on_in_the_same_wandb_run(offline, tmp_path):
    run_dir = tmp_path / "run"
    asyncrl.train(**TINY, run_dir=str(run_dir), wandb=True)
    asyncrl.train(resume=run_dir, total_steps=1024)  # --wandb comes from the saved config
    first, second = offline_runs(run_dir)
    stored = json.loads((run_dir / "wandb-run.json").read_text())
    before, after = records(first), records(second)
    assert run_record(before).run_id == run_record(after).run_id == stored["id"]
    # the rows go on where the first part's ended: together, they are metrics.jsonl's
    rows = [as_logged(r) for r in metrics_rows(run_dir)]
    assert max(r["env_steps"] for r in history(before)) == 512
    assert min(r["env_steps"] for r in history(after)) > 512
    assert history(before) + history(after) == rows
    assert config(after)["total_steps"] == 1024
    assert summary(after)["env_steps"] == 1024 and summary(after)["resumed"] is True


@pytest.mark.parametrize(
    ("error", "code"), [(RuntimeError("the callback broke"), 1), (KeyboardInterrupt(), 130)]
)
def test_the_wandb_run_ends_with_the_exit_status_of_the_run(offline, tmp_path, error, code):
    """A crash ends the W&B run as failed (1), Ctrl+C as `asyncrl train` exits (130)."""

    def fail(row: dict[str, Any]) -> None:
        if row["iteration"] == 2:
            raise error

    with pytest.raises(type(error)):
        asyncrl.train(**TINY, run_dir=str(tmp_path / "run"), wandb=True, callback=fail)
    (offline_run,) = offline_runs(tmp_path / "run")
    recs = records(offline_run)
    assert exit_code(recs) == code
    assert summary(recs)["ended"] == ("error" if code == 1 else "signal")


def test_eval_logs_its_result_and_video_to_the_runs_wandb_run(offline, tmp_path, capsys):
    pytest.importorskip("pygame")  # renders CartPole for the video
    run_dir, video = tmp_path / "run", tmp_path / "cartpole.gif"
    asyncrl.train(**TINY, run_dir=str(run_dir), wandb=True)
    capsys.readouterr()
    argv = ["eval", str(run_dir), "--episodes", "2", "--video", str(video), "--wandb"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    training, evaluation = offline_runs(run_dir)
    recs = records(evaluation)
    assert run_record(recs).run_id == run_record(records(training)).run_id
    (row,) = history(recs)
    media = row.pop("evaluate/video")
    names = ("mean_return", "std_return", "mean_length", "std_length", "episodes")
    assert row == {"env_steps": 512, **{f"evaluate/{k}": result[k] for k in names}}
    assert media["_type"] == "video-file"
    assert (evaluation / "files" / media["path"]).read_bytes() == video.read_bytes()
    assert exit_code(recs) == 0


def test_wandb_without_the_package_is_one_line_before_anything_starts(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, as uninstalled
    run_dir = tmp_path / "run"
    assert main(["train", "--wandb", "--run-dir", str(run_dir)]) == 2
    assert main(["eval", str(run_dir), "--wandb"]) == 2
    err = capsys.readouterr().err.splitlines()
    line = (
        "asyncrl: error: wandb: logging to Weights & Biases needs the wandb package, which is "
        "not installed: pip install 'asyncrl[wandb]'"
    )
    assert err == [line, line]
    assert not run_dir.exists()
