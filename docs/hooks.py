"""MkDocs hook: the docstrings name objects with Sphinx roles (``:class:`~a.b.C```), which
Markdown renders as the role's text followed by code. Keep the code only (the last component for
``~`` names, as Sphinx shows them)."""

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _name(m: re.Match) -> str:
    tilde, target = m.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub(_name, html)
