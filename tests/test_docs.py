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


# -- figures that can drift: a test for each, or the figure goes ---------------------------------------------------
DOCS = ["README.md", "docs/GRADING.md", "docs/AUTHORING.md", "deploy/README.md"]
# a count of this suite's tests or a time of its run: pytest prints both at the end of every run
SUITE_FIGURE = re.compile(r"\b\d[\d,]* (?:passed|failed|skipped|errors?)\b|\(\d[\d,]* tests\b|\b\d[\d,]* tests:|"
                          r"\b(?:two|three|four|five|six|seven) (?:hub |browser )?tests skip")


def suite_figures(text: str) -> list[str]:
    return [m.group(0) for m in SUITE_FIGURE.finditer(text)]


def test_no_doc_states_how_many_tests_ran_or_how_long():
    found = {d: suite_figures((ROOT / d).read_text(encoding="utf-8")) for d in DOCS}
    assert not any(found.values()), f"test counts belong in pytest's output, not the docs: {found}"


def test_the_suite_figure_check_sees_one():
    """The pairing: the figures the docs used to state are caught."""
    for stale in ("226 passed in 2 m 48 s", "the full tier (361 tests: 17 m 44 s", "the two hub tests skip"):
        assert suite_figures(stale), stale
    assert not suite_figures("nbgrader's own exchange tests (0.9.6, as installed with it) run against it")


def test_the_peer_exchange_figures_are_its_list():
    """deploy/README's counts of nbgrader's exchange tests that differ on purpose are tests/test_peer_exchange.py's."""
    from collections import Counter

    from tests.test_peer_exchange import DELIBERATE, INBOUND_BY_PATH, SUBMIT_AS_ANOTHER

    text = " ".join((ROOT / "deploy" / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"with it, (\d+) tests\) run against this exchange.*?: (\d+) pass, the other (\d+) differ on "
                  r"purpose, each listed there with its reason: (\d+) submit as another student.*?, (\d+) read "
                  r"`inbound/<submission>` by path", text)
    assert m, "deploy/README.md's paragraph on nbgrader's exchange tests"
    total, passed, differ, another, by_path = map(int, m.groups())
    by_reason = Counter(DELIBERATE.values())
    assert (differ, another, by_path) == (len(DELIBERATE), by_reason[SUBMIT_AS_ANOTHER], by_reason[INBOUND_BY_PATH])
    assert passed + differ == total


def test_the_xss_corpus_figures_are_the_corpus():
    """docs/GRADING.md's and README's counts of the XSS corpus are tests/xss_corpus.py's."""
    from tests.xss_corpus import OUTPUT_RUNS, PAYLOADS, RUNS

    grading = " ".join((ROOT / "docs" / "GRADING.md").read_text(encoding="utf-8").split())
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    markdown = int(re.search(r"holding (\d+) markdown payloads", grading).group(1))
    outputs = int(re.search(r"and (\d+) rich outputs", grading).group(1))
    assert markdown == len(PAYLOADS)
    ran = len(RUNS) + len(OUTPUT_RUNS)
    assert f"{ran} payloads ran" in grading and f"{ran} of a {markdown + outputs}-payload corpus ran" in grading
    assert f"an XSS corpus ({markdown + outputs} payloads)" in readme and f"none runs there ({ran}" in readme
