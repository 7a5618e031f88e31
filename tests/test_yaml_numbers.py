"""Numbers in YAML as people write them: ``lr: 3e-4`` and ``total_steps: 1e6`` are numbers,
and every number takes the type of its setting."""

from __future__ import annotations

import pytest
import yaml

from asyncrl.cli import main
from asyncrl.config import ConfigError, load_yaml
from asyncrl.settings import from_dict


def _yaml(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3e-4", 3e-4),
        ("1e6", 1e6),
        ("1E6", 1e6),
        ("1.0e6", 1e6),
        ("-2.5e-3", -2.5e-3),
        ("+1e+2", 100.0),
        (".5e1", 5.0),
        ("1_000e3", 1e6),
        ("1.0e+6", 1e6),  # what YAML 1.1 read as a float already
    ],
)
def test_exponents_without_a_dot_or_a_sign_are_floats(tmp_path, text, value):
    loaded = load_yaml(_yaml(tmp_path, f"lr: {text}\n"))["lr"]
    assert type(loaded) is float and loaded == value


@pytest.mark.parametrize("text", ["e6", "1e", "3e-4x", "1e6s", "v1e6"])
def test_what_is_not_a_number_stays_a_string(tmp_path, text):
    assert load_yaml(_yaml(tmp_path, f"env: {text}\n"))["env"] == text


def test_other_values_and_the_global_safe_loader_are_unchanged(tmp_path):
    data = load_yaml(_yaml(tmp_path, "seed: 12\ngamma: 0.99\nnorm_obs: yes\nhidden: [64, 64]\n"))
    assert data == {"seed": 12, "gamma": 0.99, "norm_obs": True, "hidden": [64, 64]}
    assert yaml.safe_load("x: 3e-4") == {"x": "3e-4"}  # only asyncrl's loader reads it


def test_an_int_setting_given_a_whole_float_becomes_an_int():
    cfg = from_dict({"total_steps": 1e6, "learning_starts": 1e4, "hidden": [64, 64]})
    assert cfg.total_steps == 1_000_000 and type(cfg.total_steps) is int
    assert cfg.learning_starts == 10_000 and type(cfg.learning_starts) is int


@pytest.mark.parametrize("value", [2.5, float("inf"), float("nan")])
def test_an_int_setting_given_a_fraction_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as e:
        from_dict({"total_steps": value})
    message = str(e.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("total_steps: expected a whole number, got ")


def test_a_float_setting_given_an_int_is_that_float():
    cfg = from_dict({"lr": 1, "max_seconds": 60})
    assert cfg.lr == 1.0 and type(cfg.lr) is float
    assert cfg.max_seconds == 60.0 and type(cfg.max_seconds) is float
    assert from_dict({"norm_obs": True}).norm_obs is True  # a bool is not a number


def test_the_cli_trains_with_the_numbers_of_a_yaml_file(tmp_path, capsys, runs_seen):
    path = _yaml(tmp_path, "lr: 3e-4\ntotal-steps: 1e6\nq_lr: 1e-3\n")
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    cfg = runs_seen[0][0]
    assert cfg.lr == 3e-4 and cfg.q_lr == 1e-3
    assert cfg.total_steps == 1_000_000 and type(cfg.total_steps) is int
    path.write_text("total_steps: 2.5\n")
    assert main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["asyncrl: error: total_steps: expected a whole number, got 2.5"]


@pytest.mark.parametrize("text, value", [("1e6", 1_000_000), ("1_000_000", 1_000_000), ("3", 3)])
def test_integer_flags_take_numbers_as_people_write_them(text, value):
    from asyncrl.cli import build_parser

    args = build_parser().parse_args(["train", "--total-steps", text])
    assert args.total_steps == value and isinstance(args.total_steps, int)


@pytest.mark.parametrize("text", ["2.5", "1e-3", "inf", "nan", "many"])
def test_integer_flags_refuse_what_is_not_a_whole_number(text, capsys):
    from asyncrl.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--total-steps", text])
    err = capsys.readouterr().err
    assert "--total-steps" in err and "whole number" in err, err
