"""MkDocs hook: shows the docstrings' Sphinx roles (``:func:`load```) as plain code.

The modules' docstrings use reST roles, which Markdown leaves as text (``:func:<code>load</code>``
after rendering); on the API reference the role prefix is dropped and the code stays.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc|obj):(?=<code>)")


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri.startswith("reference/"):
        return ROLE.sub("", html)
    return html
