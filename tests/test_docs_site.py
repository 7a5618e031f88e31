"""The documentation site as a reader meets it, and the field tables that must match the code.

The site is built from ``docs/`` into a temporary directory, served on 127.0.0.1 by a server
that records every request, and opened in headless Chromium (Debian's ``chromium``): each page
checked must render its title and navigation, and nothing it loads, nor any link on it within
the site, may answer 404. With ``ASYNCRL_DOCS_SCREENSHOTS=1`` the test also writes the
screenshots kept in ``docs/img/``. Skipped, with a reason starting ``docs site:``, where MkDocs
or Chromium is missing (``pip install -e ".[docs]"``, ``apt-get install chromium``); CI has both.

``test_run_files_page_documents_every_key`` runs a short training run and checks that every key
of its ``summary.json`` and ``metrics.jsonl`` is in the tables of ``reference/run-files.md``.
"""

from __future__ import annotations

import html.parser
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NAV_SECTIONS = ("Getting started", "Concepts", "Guides", "Benchmarks", "Reference")
# (path in the site, the page's <title>, its heading, the screenshot kept in docs/img/ or None)
PAGES = (
    ("", "asyncrl", "asyncrl", "site-home.png"),
    (
        "guides/presets/",
        "Presets - asyncrl",
        "Presets: defaults that fit the env",
        "site-guide.png",
    ),
    ("reference/api/", "Python API - asyncrl", "Python API reference", None),
)
# the home page's screenshot shows all of it: what asyncrl is, install, train, the results
WINDOWS = {"site-home.png": "1280,2500", "site-guide.png": "1280,900"}

pytestmark = pytest.mark.xdist_group("docs_site")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _need_tools() -> str:
    missing = [m for m in ("mkdocs", "material", "mkdocstrings") if not importlib.util.find_spec(m)]
    if missing:
        pytest.skip(f"docs site: {', '.join(missing)} not installed (pip install -e '.[docs]')")
    browser = _chromium()
    if browser is None:
        pytest.skip("docs site: chromium not installed (apt-get install chromium)")
    return browser


class _Recorder(ThreadingHTTPServer):
    """A static server of the built site that keeps (path, status) of every request."""

    daemon_threads = True

    def __init__(self, root: Path):
        self.log: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), partial(_Handler, directory=str(root)))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return  # the browser went away mid-response (it is ended after each page)
        super().handle_error(request, client_address)

    def take_log(self) -> list[tuple[str, int]]:
        with self.lock:
            log, self.log = self.log, []
        return log


class _Handler(SimpleHTTPRequestHandler):
    def log_request(self, code: object = "-", size: object = "-") -> None:
        server: _Recorder = self.server  # type: ignore[assignment]
        with server.lock:
            server.log.append((self.path, int(getattr(code, "value", code))))

    def log_message(self, format: str, *args: object) -> None:
        pass  # the log above is what the test reads; stderr stays quiet


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built without --strict: CI's ``mkdocs build --strict`` checks the warnings;
    this checks what a browser gets."""
    _need_tools()
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, f"mkdocs build failed:\n{build.stdout}\n{build.stderr}"
    return out


@pytest.fixture(scope="module")
def server(site: Path):
    httpd = _Recorder(site)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _browse(browser: str, profile: Path, url: str, *args: str) -> str:
    """Run headless Chromium once on ``url``; returns its stdout (the DOM with --dump-dom).
    Chromium and its helpers run in a process group of their own, ended with it."""
    profile.mkdir(parents=True, exist_ok=True)
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=3000",
        *args,
        url,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers left behind, if any
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, f"chromium exited with {proc.returncode} on {url}"
    return out


class _Page(html.parser.HTMLParser):
    """What the test reads of a rendered page: its title, h1, primary navigation and links."""

    def __init__(self) -> None:
        super().__init__()
        self.title = self.h1 = ""
        self.nav_text: list[str] = []
        self.links: list[str] = []
        self._in: list[str] = []
        self._nav_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "nav" and "md-nav--primary" in (a.get("class") or ""):
            self._nav_depth = 1
        elif tag == "nav" and self._nav_depth:
            self._nav_depth += 1
        if tag == "a" and a.get("href"):
            self.links.append(a["href"] or "")
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._nav_depth:
            self._nav_depth -= 1
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if not self._in:
            return
        if self._in[-1] == "title":
            self.title += data
        elif "h1" in self._in:
            self.h1 += data
        if self._nav_depth:
            self.nav_text.append(data.strip())


def _internal_targets(base: str, page_url: str, links: list[str]) -> set[str]:
    out = set()
    for href in links:
        url = urllib.parse.urljoin(page_url, href)
        url = urllib.parse.urldefrag(url)[0]
        if url.startswith(base):
            out.add(url)
    return out


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize(("path", "title", "heading", "shot"), PAGES, ids=["home", "guide", "api"])
def test_page_renders_with_navigation_and_no_404(server, tmp_path, path, title, heading, shot):
    browser = _need_tools()
    url = server.base + path
    server.take_log()
    dom = _browse(browser, tmp_path / "profile", url, "--dump-dom")
    loads = server.take_log()

    page = _Page()
    page.feed(dom)
    assert page.title.strip() == title, page.title
    assert page.h1.strip().rstrip("¶").strip() == heading, page.h1  # ¶: the permalink
    nav = " ".join(page.nav_text)
    for section in NAV_SECTIONS:
        assert section in nav, f"{section!r} missing from the navigation of {url}"
    assert any(p in ("/" + path, "/" + path + "index.html") for p, _ in loads), loads
    missing = sorted({p for p, status in loads if status == 404})
    assert not missing, f"{url} loaded resources that answered 404: {missing}"

    targets = _internal_targets(server.base, url, page.links)
    assert targets, f"no links within the site on {url}"
    broken = sorted(t for t in targets if _status(t) == 404)
    assert not broken, f"{url} links to pages that answer 404: {broken}"

    if shot and os.environ.get("ASYNCRL_DOCS_SCREENSHOTS") == "1":
        png = DOCS / "img" / shot
        _browse(
            browser,
            tmp_path / "shot",
            url,
            f"--screenshot={png}",
            f"--window-size={WINDOWS[shot]}",
            "--hide-scrollbars",
        )
        assert png.stat().st_size > 10_000


# ----------------------------------------------------------------- summary.json, metrics.jsonl
def _documented(section: str) -> set[str]:
    """The keys in the first column of the tables of one ``##`` section of run-files.md."""
    text = (DOCS / "reference" / "run-files.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    body = next(p for p in parts if p.startswith(section))
    keys = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            keys.update(re.findall(r"`([^`]+)`", first))
    return keys


def _undocumented(keys: set[str], documented: set[str]) -> set[str]:
    # per-worker keys (worker_env_steps/0, /1, ...) are documented once as .../<i>
    return {k for k in keys if re.sub(r"/\d+$", "/<i>", k) not in documented}


def test_run_files_page_documents_every_key(tmp_path):
    import asyncrl

    result = asyncrl.train(
        "CartPole-v1",
        backend="inline",
        actors=1,
        envs_per_actor=2,
        rollout=16,
        minibatch_size=16,
        total_steps=512,
        eval_every=256,
        eval_episodes=1,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
    )
    summary = json.loads((result.run_dir / "summary.json").read_text())
    rows = [
        json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    row_keys = set().union(*rows)
    assert any("eval/mean_return" in r for r in rows), "the run made no evaluation row"

    missing = _undocumented(set(summary), _documented("`summary.json`"))
    assert not missing, f"summary.json keys missing from docs/reference/run-files.md: {missing}"
    missing = _undocumented(row_keys, _documented("`metrics.jsonl`"))
    assert not missing, f"metrics.jsonl keys missing from docs/reference/run-files.md: {missing}"


def test_readme_links_resolve():
    """The README links into docs/ (read on a forge or in a clone): every relative link must
    name a file that exists. MkDocs checks the links within docs/, not the README's."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    missing = [
        t
        for t in targets
        if not t.startswith(("http://", "https://", "#")) and not (ROOT / t.split("#")[0]).exists()
    ]
    assert not missing, f"README.md links to files that do not exist: {missing}"
