"""The documentation stays true to the code: the component list is generated
from the registry, every built-in is described, links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import harness
from harness import listing
from harness.registry import DISABLE_AUTOLOAD_ENV, KINDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def builtin_registry() -> harness.Registry:
    return harness.Registry(harness.make_plugin_manager(load_entrypoints=False))


def test_components_page_is_the_registry_listing():
    expected = listing.markdown(builtin_registry(), list(KINDS))
    stored = (DOCS / "components.md").read_text()
    assert stored == expected, (
        f"docs/components.md is out of date with the registry; refresh it with\n"
        f"    {listing.MARKDOWN_COMMAND}")


def test_markdown_option_prints_the_components_page(capsys, monkeypatch):
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    assert listing.main(["--markdown"]) == 0
    assert capsys.readouterr().out == listing.markdown(builtin_registry(), list(KINDS))


def test_markdown_lists_every_parameter_with_its_default_and_doc():
    registry = builtin_registry()
    text = listing.markdown(registry, ["p_player"])
    assert text.startswith("# Components") and "## dataset" not in text
    for name in registry.names("p_player"):
        section = text.split(f"### p_player `{name}`\n", 1)[1].split("\n### ", 1)[0]
        assert listing.summary(registry.get("p_player", name).cls) in section
        for param, spec in registry.get("p_player", name).cls.params.items():
            row = f"| `{param}` | {listing._default_cell(spec)} | "
            assert row in section and spec.doc.replace("|", r"\|") in section, (name, param)
    assert "| `delta` | `0.05` | a float in (0, 1) |" in text


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_builtin_is_described_in_algorithms_page(kind):
    text = (DOCS / "algorithms.md").read_text()
    missing = [name for name in builtin_registry().names(kind)
               if f"`{name}`" not in text and f"**{name}**" not in text]
    assert not missing, f"docs/algorithms.md does not describe the {kind}(s) {missing}"


def test_readme_fits_a_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; keep it at most 200"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    text = FENCE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading with anchor #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)} links to {broken}"
