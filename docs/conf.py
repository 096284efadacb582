"""Sphinx settings for leased's docs: MyST Markdown pages, the API from docstrings, the CLI from click.

Build: .venv/bin/sphinx-build -W --keep-going -n -b html docs docs/_build/html
(tests/faces/test_docs.py builds it the same way: any warning, broken reference or broken link fails.)

screenshots/site-*.png show the built site; re-take them after a change to its look with
    chromium --headless --hide-scrollbars --window-size=1280,900 --screenshot=docs/screenshots/site-home.png \
        file://$PWD/docs/_build/html/index.html
(and reference/api.html for site-api-reference.png).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))  # this checkout's leased, installed or not

import leased  # noqa: E402  (after the path above)

project = "leased"
author = "the leased authors"
copyright = "2026, the leased authors"
release = version = leased.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.intersphinx", "sphinx_click"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "screenshots/*.py"]

# Headings get anchors, so the pages' links to a section (reliability.md#failover) resolve and
# are checked like any other reference.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# Signatures as written in the code, without the module path on every type.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True  # `retention=_UNSET`, not `<object object at 0x...>`
autodoc_typehints_format = "short"
# Every public field and member, documented or not: a dataclass field says what it is by its type.
autodoc_default_options = {"members": True, "undoc-members": True}  # the errors page adds show-inheritance
add_module_names = False
# Docstrings write code in single backquotes, as Markdown does: show it as code.
default_role = "code"

# The standard library's names link to its docs when a copy of its inventory is reachable; the
# build does not depend on it (no network here), so the references fall back to plain text.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

html_theme = "furo"
# Click's help texts write options as --pending: keep two hyphens, not an en dash.
smartquotes = False
html_title = f"leased {release}"
html_static_path: list[str] = []
# A fence with no language is a synopsis, a tree or a transcript: not Python to colour.
highlight_language = "none"

# Cross-references are checked (-n): every name a signature or a page mentions must resolve,
# except these, which have no page to point to.
nitpicky = True
nitpick_ignore_regex = [
    # The standard library's: its inventory would come from docs.python.org, and the build
    # runs without a network.
    ("py:(class|obj|exc)", r"(datetime|enum|threading|typing|contextlib|collections\.abc|concurrent\.futures|asyncio)\..*"),
    ("py:(class|obj)", r"(timedelta|datetime|Callable|Awaitable|Iterator|AsyncIterator)"),
    # Type variables of the generic Task: `P` a handler's parameters, `R` its result.
    ("py:(class|obj)", r"~?(leased\.(app|tasks|workflows)\.)?[PR]"),
    # Internal types a public signature names (a protocol the app satisfies, the engine's own
    # records): documented in their modules, not promised to users.
    ("py:class", r"(leased\.workflows\.)?WorkflowApp|AttemptEnd"),
    ("py:class", r"ScheduledTicks|AbstractContextManager|(leased\.tasks\.)?Producer|RuntimePort|Handler|Events|Pruner|Children"),
    # What autodoc shows of a string annotation it could not evaluate: the text itself, or a piece
    # of it cut at a comma.
    ("py:class", r"'.*|dict\[str"),
]
