"""The docs site builds as CI would build it: any warning fails it, and so does a broken reference
(nitpicky: every name a signature or a page mentions must resolve) or a broken internal link.

The code blocks of the pages are run by tests/faces/test_readme.py, with the README's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from paths import ROOT

DOCS = ROOT / "docs"

pytest.importorskip("sphinx",
                    reason="the docs tools come with the test dependency group: pip install -e . --group test")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module's tests."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                            "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    return out / "html"


class Links(HTMLParser):
    """The ids a page defines and the local links it makes (href and src)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name in ("href", "src") and value and not urlsplit(value).scheme and not value.startswith("//"):
                self.links.append(value)


def parsed(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text())
    return links


def test_the_site_builds_without_a_warning_and_every_internal_link_lands(site):
    site = site.resolve()
    pages = {page: parsed(page) for page in site.rglob("*.html")}
    broken = []
    for page, links in pages.items():
        for link in links.links:
            path, fragment = urlsplit(link).path, urlsplit(link).fragment
            target = (page.parent / unquote(path)).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif fragment and target.suffix == ".html" and unquote(fragment) not in pages[target].ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_every_public_name_has_its_reference_entry(site):
    import leased

    documented = parsed(site / "reference" / "api.html").ids | parsed(site / "reference" / "errors.html").ids
    assert [name for name in leased.__all__ if f"leased.{name}" not in documented] == []


def test_every_command_has_its_reference_entry(site):
    from leased.cli.main import cli

    documented = parsed(site / "reference" / "cli.html").ids
    # A hidden command is the supervisor's own (bury-worker), not one a user types.
    assert [name for name, command in cli.commands.items()
            if not command.hidden and f"leased-{name}" not in documented] == []


def test_the_home_page_is_the_readme(site):
    # Reused, not copied: a sentence of the README's is on the home page, and its links into docs/
    # lead to the pages there.
    home = (site / "index.html").read_text()
    assert "Durable background jobs in the database your application already runs." in home
    assert 'href="tutorial.html"' in home and 'href="reliability.html"' in home


def test_the_readmes_command_builds_the_docs_where_the_test_command_installed_them():
    # The README's one-line command uses the test command's venv: the docs tools must be in the
    # test dependency group it installs.
    import tomllib

    section = (ROOT / "README.md").read_text().split("## The docs", 1)[1]
    (command,) = re.findall(r"```sh\n(.+?)\n```", section, re.S)
    assert command.startswith(".venv/bin/sphinx-build ") and " docs docs/_build/html" in command
    test_group = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["test"])
    assert all(tool in test_group for tool in ("sphinx", "myst-parser", "sphinx-click", "furo"))


def test_the_state_diagram_draws_every_status_and_exactly_the_transitions_of_its_table(site):
    # states.svg is drawn by hand: a box per JobStatus (id="status-NAME"), an arrow per transition
    # (data-from, data-to; "new" is a job not yet written), the same as the rows of the page's table.
    from leased import JobStatus

    svg = ElementTree.parse(DOCS / "reference" / "states.svg").getroot()
    groups = list(svg.iter("{http://www.w3.org/2000/svg}g"))
    boxes = {group.get("id").removeprefix("status-") for group in groups
             if (group.get("id") or "").startswith("status-")}
    assert boxes == {status.value for status in JobStatus}
    arrows = {(group.get("data-from"), group.get("data-to")) for group in groups if group.get("data-from")}
    table = set()
    for row in (DOCS / "reference" / "states.md").read_text().splitlines():
        cells = row.split("|")[1:3]
        if row.startswith("| ") and len(cells) == 2 and "`" in cells[1]:
            sources = ["new"] if cells[0].strip() == "(new)" else re.findall(r"`(\w+)`", cells[0])
            table |= {(source, target) for source in sources for target in re.findall(r"`(\w+)`", cells[1])}
    assert arrows == table
    # And the built page shows it.
    assert 'src="../_images/states.svg"' in (site / "reference" / "states.html").read_text()
