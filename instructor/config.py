"""The course an instructor grades: its nbgrader config, its gradebook, whether a section can be graded yet."""
from __future__ import annotations

from pathlib import Path

from attncourse.course import SECTIONS, resolve_section


class CourseError(RuntimeError):
    """The course is not ready to be graded (what to run instead is in the message)."""


def submitted_students(root: Path, section: str, only=None) -> list:
    """Who submitted ``section``: the names under ``submitted/`` with a ``<section>`` entry, sorted (the one
    listing every grading path and the report use).  ``only``: keep these names.  An entry that is a link is
    listed: the prescan refuses it by name (instructor/prescan.py), it is never skipped in silence."""
    sub = Path(root) / "submitted"
    names = sorted(p.name for p in sub.iterdir() if (p / section).is_dir()) if sub.is_dir() else []
    return [s for s in names if not only or s in only]


CONFIG_FAILED = "Exception while loading config file"


class ConfigError(RuntimeError):
    """nbgrader_config.py raised: nbgrader would carry on with defaults (no judge, no limits)."""


def check_config_loaded(proc):
    """Refuse (ConfigError) a plain ``nbgrader`` run (a CompletedProcess) in which nbgrader could not load
    nbgrader_config.py."""
    log = (proc.stdout or "") + (proc.stderr or "")
    if CONFIG_FAILED in log:
        start = log.find(CONFIG_FAILED)
        raise ConfigError("nbgrader could not load nbgrader_config.py; grading without it would drop the "
                          "judge of the hidden checks, the sandbox, time and memory limits:\n" + log[start:start + 2000])
    return proc


def load_config(folder: Path):
    """nbgrader_config.py of ``folder``, loaded the way nbgrader loads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()


def course_db(root: Path) -> tuple[str, str]:
    """(db_url, course_id) of the course at ``root``."""
    cfg = load_config(root)
    cd = cfg.get("CourseDirectory", {})
    db_url = cd.get("db_url") or f"sqlite:///{root / 'gradebook.db'}"
    return db_url, cd.get("course_id", "default_course")


def ready(root: Path, sections) -> tuple[str, str]:
    """(db_url, course_id) once every section can be graded; a CourseError says what to run instead."""
    db_url, course_id = course_db(root)
    for section in sections:
        check_section(root, section, db_url, course_id)
    return db_url, course_id


def check_section(root: Path, section: str, db_url: str, course_id: str):
    """Refuse, with what to run instead, a section that cannot be graded yet."""
    from nbgrader.api import MissingEntry

    from .gradebook import has_section

    if not (root / "source" / section / f"{section}.ipynb").is_file():
        raise CourseError(f"{section}: no source/{section}/{section}.ipynb in {root}")
    run = f"run `./course build {section}` (or `nbgrader generate_assignment {section} --force`) first, then grade"
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).is_file():
        raise CourseError(f"there is no gradebook yet ({db_url}): {run}")
    try:
        if not has_section(db_url, course_id, section):
            raise MissingEntry()
    except MissingEntry:
        raise CourseError(f"{section} is not in the gradebook yet: {run}") from None
    except Exception as exc:  # noqa: BLE001 - a database that cannot be opened
        raise CourseError(f"cannot open the gradebook {db_url}: {type(exc).__name__}: {exc}") from None


def release_notebook(root: Path, section: str):
    """The section's release notebook (else its source), or None: what the locked cells should look like."""
    import nbformat

    for base in ("release", "source"):
        p = root / base / section / f"{section}.ipynb"
        if p.is_file():
            return nbformat.read(str(p), as_version=4)
    return None


def release_points(release) -> float:
    """The points of a section's graded cells (the maximum of a submission nbgrader could not score)."""
    try:
        return float(sum(float(c.metadata["nbgrader"].get("points", 0)) for c in (release.cells if release else [])
                         if c.metadata.get("nbgrader", {}).get("grade")))
    except Exception:  # noqa: BLE001
        return 0.0


def resolve_sections(names, root: Path) -> list:
    """Sections from the command line: full names, numbers, prefixes, or ``all`` (every section with submissions).

    A CourseError says which name is unknown, or that none of them has a submission yet.
    """
    out = []
    for name in names:
        if name == "all":
            out += [s for s in SECTIONS if submitted_students(root, s)]
        else:
            try:
                out.append(resolve_section(name))
            except ValueError as exc:
                raise CourseError(f"{exc} or all") from None
    if not out:
        raise CourseError("no submissions under submitted/ for " + " ".join(names))
    return list(dict.fromkeys(out))
