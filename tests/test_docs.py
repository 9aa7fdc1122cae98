"""The docs name what the code has: README's section table is the course's section list."""
from __future__ import annotations

import re

from tests.harness import ROOT


def readme_sections(text: str) -> list[tuple[str, str]]:
    """(number, notebook) of each row of README's "The sections" table, in order."""
    body = text.split("## The sections", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\|\s*(\d\d)\s*\|\s*`([^`]+)`\s*\|", body, flags=re.M)


def test_readme_section_table_matches_sections():
    from attncourse.course import SECTIONS

    rows = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [name for _, name in rows] == SECTIONS, (
        f"README's section table lists {[n for _, n in rows]}; attncourse.course.SECTIONS is {SECTIONS}")
    assert all(name.startswith(num + "_") for num, name in rows), rows
    count = {8: "Eight", 9: "Nine", 10: "Ten", 11: "Eleven", 12: "Twelve"}.get(len(SECTIONS), str(len(SECTIONS)))
    assert f"{count} short Jupyter notebooks" in (ROOT / "README.md").read_text(encoding="utf-8"), "README's count"


def test_readme_section_table_check_sees_a_missing_row():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = readme_sections(text)
    last = [ln for ln in text.splitlines() if ln.startswith(f"| {rows[-1][0]} |")][0]
    assert len(readme_sections(text.replace(last + "\n", ""))) == len(rows) - 1
