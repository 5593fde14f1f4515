"""The README and docs/ link to what exists: every relative link names a file or folder of the
checkout, and every ``#anchor`` a heading of the page it points to (GitHub's heading ids).

The README was cut to a front page and the rest moved to docs/ (issue 46): a section renamed or
moved must not leave a link behind that leads nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.M | re.S)
# Pages another part of the project generates: they must exist once their generator does.
GENERATED = {"docs/cli.md": "scripts/cli_reference.py"}


def anchor(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text())
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(FENCED.sub("", page.read_text()))
            if not re.match(r"[a-z]+:", target)]  # https:, mailto: are not the checkout's


def test_the_anchor_rule_is_githubs() -> None:
    assert anchor("Your first campaign on a real cluster") == "your-first-campaign-on-a-real-cluster"
    assert anchor("The `results` view") == "the-results-view"
    assert anchor("A scheduler (an executor)") == "a-scheduler-an-executor"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        name = file.relative_to(REPO).as_posix() if file.is_relative_to(REPO) else str(file)
        if not file.exists():
            generator = GENERATED.get(name)
            if generator and not (REPO / generator).exists():
                continue  # not generated in this checkout yet
            broken.append(f"{target}: no {name}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: {name} has no heading #{fragment}")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


def test_the_readme_is_a_front_page() -> None:
    """At most 250 lines, with what set-up needs and does (issue 46)."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for needed in ("Python >= 3.11", "./scripts/quickstart.sh", "./scripts/test.sh", "PyTorch 2.13.0",
                   "DeepSpeed 0.19.8", "Chromium", "Read these files first", "docs/extending.md"):
        assert needed in text, needed
