"""The manual stays true to the repository (issue 23, "a manual a newcomer can read"): every relative link and image
in README.md and docs/ resolves (the file exists; an `#anchor` into a markdown file names one of its headings, by
GitHub's slug rules), the configuration table is the settings' own, and every repository path or module a document,
docstring or comment names exists."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import regex
from personalab.stores.settings import settings_table

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("graph", "nodes", "stores", "evals")


def documents() -> list[Path]:
    """README.md and every markdown file under docs/ (those of parallel branches included once merged)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks (a `# comment` in a bash block is no heading, a `[x](y)` there no link)."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.lstrip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            if fence is None:
                fence = marker
            elif fence == marker:
                fence = None
            kept.append("")
            continue
        kept.append("" if fence else line)
    return "\n".join(kept)


INLINE_CODE = regex.compile(r"(`+)(.+?)\1")
LINK = regex.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = regex.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", regex.MULTILINE)


def links(text: str) -> list[str]:
    """Link and image targets of a markdown text, outside code (inline code spans hide what looks like a link)."""
    return LINK.findall(INLINE_CODE.sub(lambda m: " " * len(m.group(0)), prose(text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation out, spaces to hyphens."""
    text = regex.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").replace("*", "")
    text = regex.sub(r"<[^>]+>", "", text)
    text = regex.sub(r"[^\p{L}\p{N}\p{M}\p{Pc}\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file; repeated headings get -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(doc: Path) -> list[str]:
    broken: list[str] = []
    for target in links(doc.read_text(encoding="utf-8")):
        if regex.match(r"^[a-z][a-z0-9+.-]*:", target, regex.IGNORECASE):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        file = doc if not path_part else (doc.parent / path_part).resolve()
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(file, doc.parent)}")
    return broken


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(doc: Path) -> None:
    """A moved or renamed document, section or image breaks no link of the manual."""
    assert broken_links(doc) == []


def test_the_link_check_sees_a_broken_link_and_a_wrong_anchor(tmp_path: Path) -> None:
    """The check itself: a missing file and a missing heading are reported; links in code and URLs are not."""
    (tmp_path / "other.md").write_text("# Durable writes (`stores/outbox.py`, table `outbox`)\n## Again\n## Again\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n[ok](other.md#durable-writes-storesoutboxpy-table-outbox) [ok](other.md#again-1) [ok](#title)\n"
        "[web](https://example.com/x) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n# not a heading\n```\n"
        "[gone](missing.md) [bad](other.md#no-such) ![img](pic.png) [self](#not-a-heading)\n"
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#no-such: no heading #no-such in other.md",
        "pic.png: no such file",
        "#not-a-heading: no heading #not-a-heading in doc.md",
    ]


def test_slugs_follow_github() -> None:
    assert slug("Fault tests: kill -9 at every phase (`./run bench faults`, in CI)") == (
        "fault-tests-kill--9-at-every-phase-run-bench-faults-in-ci"
    )
    assert slug("Long-term memory (seeds 001 + 004)") == "long-term-memory-seeds-001--004"
    assert slug("Dialogue (seed 002 对话功能)") == "dialogue-seed-002-对话功能"


def test_configuration_table_is_the_settings_table() -> None:
    """docs/configuration.md's table, between its markers, is `settings_table()` exactly (regenerate it, don't edit)."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    start, end = "<!-- settings-table:start -->", "<!-- settings-table:end -->"
    assert start in text and end in text
    table = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == settings_table().strip()


# A repository path (`graph/http/users.py`) or a module (`personalab.stores.outbox`, `nodes.rules.retrieval.retrieve`).
REPO_PATH = regex.compile(r"(?<![\w/.-])(?:graph|stores|nodes|evals|tests)/[\w/]+\.py\b")
MODULE = regex.compile(r"(?<![\w.])(?:personalab\.)?(?:graph|nodes|stores|evals)(?:\.[A-Za-z_]\w*)+(?![\w/])")


def module_exists(dotted: str) -> bool:
    """`personalab.a.b.name`: the longest prefix that is a package or module exists, and what follows it is a name
    found in that module (a function, class or constant); `graph.x` without a module in between is a value's
    attribute (a compiled graph's method), not a module path, and is not checked."""
    parts = dotted.split(".")
    prefixed = parts[0] == "personalab"
    if prefixed:
        parts = parts[1:]
    if parts[-1] == "py" or (not prefixed and len(parts) < 3):
        return True
    here = ROOT / parts[0]
    rest = parts[1:]
    while rest and (here / rest[0]).is_dir():
        here, rest = here / rest[0], rest[1:]
    if rest and (here / f"{rest[0]}.py").is_file():
        here, rest = here / f"{rest[0]}.py", rest[1:]
    if not rest:
        return True
    source = here if here.suffix == ".py" else here / "__init__.py"
    return source.is_file() and regex.search(rf"\b{regex.escape(rest[0])}\b", source.read_text("utf-8")) is not None


def missing_names(text: str) -> list[str]:
    missing = [path for path in REPO_PATH.findall(text) if not (ROOT / path).is_file()]
    missing += [name for name in MODULE.findall(text) if not module_exists(name)]
    return missing


MANUAL = [doc for doc in documents() if doc.parent.name != "benchmarks"]


@pytest.mark.parametrize("doc", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_a_document_names_exists(doc: Path) -> None:
    """`stores/outbox.py` or `personalab.stores.history.forget_paths` in the manual names what is there (the dated
    benchmark logs are not checked: they quote the output of their day, which names the code of their day)."""
    assert missing_names(prose(doc.read_text(encoding="utf-8"))) == []


def comments_and_docstrings(path: Path) -> Iterator[str]:
    """The docstrings of a module, its classes and functions, and the text after `#` on each line (a `#` inside a
    string adds a little text to check, never hides a comment; tokenize would take seconds for the whole tree)."""
    source = path.read_text(encoding="utf-8")
    nodes: list[ast.AST] = [ast.parse(source)]
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield docstring
            nodes.extend(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):  # definitions under `if TYPE_CHECKING:`, `try:`, …
            nodes.extend(ast.iter_child_nodes(node))
    for line in source.splitlines():
        if "#" in line:
            yield line.split("#", 1)[1]


def test_docstrings_and_comments_name_modules_that_exist() -> None:
    """Docstrings never name modules that moved (LAYOUT: "docstrings never name modules that moved")."""
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for floor in FLOORS
        for path in sorted((ROOT / floor).rglob("*.py"))
        for text in comments_and_docstrings(path)
        for name in missing_names(text)
    ]
    assert missing == []


def test_the_name_check_sees_a_moved_module() -> None:
    assert missing_names("see `stores/outbox.py` and personalab.stores.history.forget_paths") == []
    assert missing_names("graph/llm.py, nodes.prompts.PURPOSES, personalab.stores.nothing_here") == [
        "graph/llm.py",
        "nodes.prompts.PURPOSES",
        "personalab.stores.nothing_here",
    ]
