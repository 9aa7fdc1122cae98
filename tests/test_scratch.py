"""judge.scratch: a scratch course's gradebook is nbgrader's own, made without nbgrader's ``alembic`` subprocess;
the course package imports torch only when a notebook asks for what needs it."""
import sqlite3
import subprocess
import sys

from judge.environment import with_python_bin
from judge.scratch import alembic_head, new_gradebook


def _schema(path):
    con = sqlite3.connect(str(path))
    try:
        tables = sorted(con.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
        return tables, con.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        con.close()


def test_a_new_gradebook_is_the_one_nbgrader_makes(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", with_python_bin())   # nbgrader runs `alembic heads` from PATH for a new file
    Gradebook(f"sqlite:///{tmp_path / 'nbgrader.db'}").close()
    new_gradebook(tmp_path / "ours.db")
    theirs, ours = _schema(tmp_path / "nbgrader.db"), _schema(tmp_path / "ours.db")
    assert ours[1] == theirs[1] == [(alembic_head(),)]
    assert ours[0] == theirs[0]
    with Gradebook(f"sqlite:///{tmp_path / 'ours.db'}") as gb:   # and nbgrader opens it as its own
        gb.add_student("s1")
        assert [s.id for s in gb.students] == ["s1"]


def test_the_package_imports_torch_only_when_asked():
    code = ("import sys, attncourse, attncourse.course; assert 'torch' not in sys.modules, 'torch at import'; "
            "from attncourse import compare, best_device; assert 'torch' in sys.modules; "
            "assert compare is attncourse.compare and set(attncourse.__all__) <= set(dir(attncourse)); "
            "import attncourse as a\ntry:\n    a.no_such_name\nexcept AttributeError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "has no attribute 'no_such_name'" in out.stdout


def _validation_error(validator, nb):
    try:
        validator.validate_nb(nb)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc)
    return None


def test_the_compiled_metadata_check_agrees_with_nbgraders():
    """CheckCellMetadataOnce (nbgrader_config.py) judges nbgrader metadata exactly as nbgrader's own check does:
    a valid notebook passes both; every corruption below fails both, with the same error."""
    import copy

    import nbformat
    from nbgrader.nbgraderformat import MetadataValidator

    from judge.preprocessors import _metadata_validator
    from tests.harness import ROOT

    nb = nbformat.read(ROOT / "source" / "02_qkv_by_hand" / "02_qkv_by_hand.ipynb", as_version=4)
    graded = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    assert _validation_error(MetadataValidator(), nb) is None
    assert _validation_error(_metadata_validator(), nb) is None
    corruptions = {
        "schema too new": lambda m: m.update(schema_version=9),
        "schema too old": lambda m: m.update(schema_version=1),
        "grade_id a number": lambda m: m.update(grade_id=5),
        "points a word": lambda m: m.update(points="ten"),
        "grade a string": lambda m: m.update(grade="yes"),
        "no points on a graded cell": lambda m: m.pop("points"),
    }
    for name, corrupt in corruptions.items():
        bad = copy.deepcopy(nb)
        corrupt(bad.cells[graded].metadata["nbgrader"])
        theirs, ours = _validation_error(MetadataValidator(), bad), _validation_error(_metadata_validator(), bad)
        assert theirs is not None, name
        assert ours == theirs, (name, ours, theirs)


def test_scratch_gradebooks_keep_their_engine_and_nothing_else(tmp_path):
    """judge.scratch.ScratchEngines: a gradebook URL under the prefix gets the same engine each time (its compiled
    statements kept); a new file at the same path is a new, empty gradebook (no connection outlives
    ``Gradebook.close``); any other URL gets a new engine, as nbgrader made it."""
    import shutil

    import nbgrader.api
    from nbgrader.api import Gradebook

    from judge.scratch import ScratchEngines, keep_engines

    saved = nbgrader.api.create_engine
    try:
        keep_engines(f"sqlite:///{tmp_path / 'kept'}/")
        engines = nbgrader.api.create_engine
        assert isinstance(engines, ScratchEngines)
        keep_engines(f"sqlite:///{tmp_path / 'kept'}/")
        assert nbgrader.api.create_engine is engines            # installed once per prefix
        seen = []
        for run in range(2):
            folder = tmp_path / "kept"
            folder.mkdir()
            new_gradebook(folder / "gradebook.db")
            with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gb:
                assert [s.id for s in gb.students] == []         # a new file: nothing of the run before
                gb.add_student(f"s{run}")
                seen.append(gb.engine)
            with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gb:
                assert [s.id for s in gb.students] == [f"s{run}"]
                seen.append(gb.engine)
            shutil.rmtree(folder)
        assert all(e is seen[0] for e in seen)
        other = tmp_path / "other.db"
        new_gradebook(other)
        with Gradebook(f"sqlite:///{other}") as a, Gradebook(f"sqlite:///{other}") as b:
            assert a.engine is not b.engine and a.engine is not seen[0]
    finally:
        nbgrader.api.create_engine = saved


def test_a_task_folder_is_the_same_path_each_time_unless_taken(monkeypatch):
    import os
    import shutil

    from instructor import task

    monkeypatch.setattr(task, "_TASK_FOLDER", [])
    first = task.task_folder()
    assert first.is_dir() and oct(first.stat().st_mode & 0o777) == "0o700" and not os.listdir(first)
    taken = task.task_folder()                 # still there (another thread's task): a fresh folder instead
    assert taken != first and taken.is_dir()
    shutil.rmtree(taken)
    shutil.rmtree(first)
    again = task.task_folder()
    assert again == first
    shutil.rmtree(again)


def test_reference_data_is_cached_by_content_not_by_path(tmp_path):
    """A worker grades each submission in a new scratch course: the same data file under a new path is not
    loaded again; a file with other bytes under a known path is."""
    import shutil

    from judge.preprocessors import reference_data, reference_inputs_bytes
    from tests.harness import ROOT

    import torch

    roots = []
    for name in ("a", "b"):
        (tmp_path / name / "graders" / "data").mkdir(parents=True)
        shutil.copy(ROOT / "graders" / "data" / "02_qkv_by_hand.pt",
                    tmp_path / name / "graders" / "data" / "02_qkv_by_hand.pt")
        roots.append(str(tmp_path / name))
    first, second = reference_data(roots[0], "02_qkv_by_hand"), reference_data(roots[1], "02_qkv_by_hand")
    assert first[0] is second[0] and first[1] is second[1]
    import io

    inputs = torch.load(io.BytesIO(reference_inputs_bytes(roots[1], "02_qkv_by_hand")), weights_only=True)
    assert inputs.keys() == first[1].keys()
    shutil.copy(ROOT / "graders" / "data" / "03_masking.pt", tmp_path / "b" / "graders" / "data" / "02_qkv_by_hand.pt")
    changed = reference_data(roots[1], "02_qkv_by_hand")
    assert changed[0]["section"] == "03_masking" and first[0]["section"] == "02_qkv_by_hand"
    assert reference_data(str(tmp_path / "none"), "02_qkv_by_hand") is None
