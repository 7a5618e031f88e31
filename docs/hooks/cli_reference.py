"""MkDocs hook: writes the command-line reference from ``asyncrl.cli.build_parser()``.

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; at build time it is
replaced by one table per subcommand, read from the parser ``asyncrl`` itself runs, so the page
cannot drift from the code. The asyncrl imported is the one in this repository's ``src/``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "reference/cli.md"


def on_config(config: Any) -> Any:
    src = Path(config.config_file_path).resolve().parent / "src"
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    return config


def _cell(text: str) -> str:
    # argparse help strings escape % as %%
    return text.replace("%%", "%").replace("|", "\\|").replace("\n", " ")


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    names = list(action.option_strings)
    if isinstance(action, argparse.BooleanOptionalAction):
        return " / ".join(f"`{n}`" for n in names)
    if action.nargs == 0:
        return ", ".join(f"`{n}`" for n in names)
    value = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return ", ".join(f"`{n} {value}`" for n in names)


def _command(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## `asyncrl {name}`", "", _cell(summary) + ".", ""]
    if parser.description:
        lines += [parser.description, ""]
    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse wraps the usage to the terminal: fix it
    try:
        usage = parser.format_usage().strip().removeprefix("usage: ")
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width
    first, *rest = usage.splitlines()
    usage = "\n".join([first, *("    " + line.strip() for line in rest)])
    if rest and len(rest) > 5:  # every flag is in the table: the usage line only says how
        positional = [a.metavar or a.dest.upper() for a in parser._actions if not a.option_strings]
        usage = " ".join([parser.prog, "[options]", *positional])
    lines += ["```text", usage, "```", "", "| argument | what (default) |", "| --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        lines.append(f"| {_flag(action)} | {_cell(action.help or '')} |")
    return lines + [""]


def cli_reference() -> str:
    """The reference as Markdown: a section per subcommand of ``asyncrl``."""
    from asyncrl.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    out: list[str] = []
    for name, command in sub.choices.items():
        out += _command(name, command, helps.get(name, ""))
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER}")
    return markdown.replace(MARKER, cli_reference())
