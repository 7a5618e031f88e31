"""CI fails on a skip it does not expect: with ASYNCRL_CI_NO_SKIP=1 (as .ci/run sets it) a test
or a whole module that skips for a reason tests/conftest.py does not allow fails the run; a
plain local run still just skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIPPING = """
import pytest

def test_an_extra_went_missing():
    pytest.importorskip("asyncrl_no_such_extra")

def test_docs_site_tools_missing():
    pytest.skip("docs site: mkdocs is not installed")

def test_cuda_here():
    pytest.skip("this machine has CUDA")

def test_runs():
    pass
"""
SKIPPED_MODULE = """
import pytest

pytest.importorskip("asyncrl_no_such_extra")

def test_never_runs():
    pass
"""


def _pytest(where: Path, ci: bool, *files: str) -> subprocess.CompletedProcess:
    # not this run's settings (nor, under xdist, its worker's)
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "ASYNCRL_CI_NO_SKIP" and not k.startswith("PYTEST_")
    }
    if ci:
        env["ASYNCRL_CI_NO_SKIP"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *files],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ci_fails_on_a_skip_it_does_not_allow_and_a_local_run_does_not(tmp_path):
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    (tmp_path / "test_module.py").write_text(SKIPPED_MODULE)
    local = _pytest(tmp_path, False)
    assert local.returncode == 0, local.stdout
    assert "1 passed, 4 skipped" in local.stdout
    ci = _pytest(tmp_path, True)
    assert ci.returncode == 1, ci.stdout
    listed = ci.stdout.split("skips CI does not allow", 1)[1].split("short test summary")[0]
    assert "test_skipping.py::test_an_extra_went_missing: could not import" in listed
    assert "test_skipping.py::test_docs_site_tools_missing: docs site: " in listed
    assert "test_module.py: could not import 'asyncrl_no_such_extra'" in listed
    assert "3 unexpected skip(s)" in listed and "test_cuda_here" not in listed
    # only allowed skips: CI passes
    allowed = _pytest(tmp_path, True, "test_skipping.py::test_cuda_here")
    assert allowed.returncode == 0, allowed.stdout
