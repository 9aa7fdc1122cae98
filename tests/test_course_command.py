"""./course: one Python entry point (tools/course.py) behind a launcher that only makes the venv."""
from __future__ import annotations

import os
import time

import pytest

from tests.harness import ROOT
from tools import course


@pytest.mark.parametrize("argv, code, says", [(["frobnicate"], 2, "unknown command 'frobnicate'"),
                                              (["setup", "--now"], 2, "takes no arguments"),
                                              (["help"], 0, "./course"), ([], 0, "COMMAND")])
def test_the_command_names_an_unknown_command(argv, code, says, capsys):
    assert course.main(argv) == code
    out = capsys.readouterr()
    assert says in out.out + out.err


def test_every_command_is_in_the_help(capsys):
    course.main(["help"])
    text = capsys.readouterr().out
    assert all(name in text for name in course.COMMANDS)
    assert set(course.MODULES) <= set(course.COMMANDS)


def test_the_launcher_only_makes_the_venv_and_runs_the_python_command():
    text = (ROOT / "course").read_text()
    assert "-m venv" in text and 'exec "$VENV/bin/python" -m tools.course "$@"' in text
    assert "pip install" not in text and "case " not in text   # (the old script: a bash case of every command)


def test_set_up_runs_again_when_a_pin_changes_not_when_a_file_is_touched(tmp_path, monkeypatch):
    """The venv's stamp holds the hash of requirements.txt and pyproject.toml: a changed pin reinstalls; a
    checkout that only rewrites the files' times does not (the stamp used to be compared by time)."""
    for name in ("requirements.txt", "pyproject.toml"):
        (tmp_path / name).write_text(f"{name} pins\n")
    monkeypatch.setattr(course, "ROOT", tmp_path)
    monkeypatch.setenv("ATTNCOURSE_VENV", "venv")
    (tmp_path / "venv").mkdir()
    assert course.needs_install()                                   # never installed
    (tmp_path / "venv" / ".installed").write_text(course.inputs_hash() + "\n")
    assert not course.needs_install()
    later = time.time() + 60
    os.utime(tmp_path / "requirements.txt", (later, later))
    assert not course.needs_install()                               # touched: same pins
    (tmp_path / "requirements.txt").write_text("requirements.txt pins\nbokeh==3.10.1\n")
    assert course.needs_install()                                   # a pin changed
    (tmp_path / "venv" / ".installed").write_text("")               # the old stamp (an empty file)
    (tmp_path / "requirements.txt").write_text("requirements.txt pins\n")
    assert course.needs_install()


def test_the_hubs_venv_copy_is_stamped_installed():
    """./course hub gives the instructor's course a venv copy that ./course must not reinstall into."""
    text = (ROOT / "deploy" / "hub.py").read_text()
    assert 'write_text(inputs_hash() + "\\n")' in text


@pytest.mark.e2e   # starts a Python to read the section list
@pytest.mark.parametrize("command", ["check", "edit"])
def test_an_unknown_section_is_a_usage_error(command, monkeypatch, capsys):
    """./course check 99 and ./course edit 99 exit 2 with the sections listed (the check's 1 is for a notebook that
    could not be checked), before anything starts; the pairing: a known section gets past this step."""
    import sys
    from pathlib import Path

    monkeypatch.setattr(course, "setup", lambda *a, **k: None)
    monkeypatch.setattr(course, "venv_python", lambda: Path(sys.executable))
    assert course.main([command, "99"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"./course {command}: unknown section '99'; one of 01_tokens") and err.count("\n") == 1
    assert course.section(command, "2") == "02_qkv_by_hand"


@pytest.mark.e2e   # starts a Python as the pip step
def test_set_up_shows_pips_steps_and_says_it_works_while_pip_is_silent(tmp_path, monkeypatch, capsys):
    """What pip fetches and installs is shown, its noise is not, and a silence longer than QUIET_S is filled with a
    line saying how long the step has worked (first set-up: 3 minutes without a line while pip installs); a
    failure ends with pip's last lines and exit status 1."""
    import sys
    from pathlib import Path

    fake = tmp_path / "pip.py"   # stands in for `python -m pip install ...`: prints, then is silent, then prints
    fake.write_text("import sys, time\nprint('WARNING: Location x is ignored', flush=True)\n"
                    "print('Collecting torch==2.13.0', flush=True)\nprint('Installing collected packages: torch', "
                    "flush=True)\ntime.sleep(1.5)\nprint('Successfully installed torch-2.13.0', flush=True)\n"
                    "sys.exit(int(sys.argv[-1]))\n")
    monkeypatch.setattr(course, "venv_python", lambda: Path(sys.executable))
    monkeypatch.setattr(course, "QUIET_S", 0.5)
    real = course.subprocess.Popen
    monkeypatch.setattr(course.subprocess, "Popen", lambda cmd, **kw: real([cmd[0], str(fake), cmd[-1]], **kw))
    course.pip("[2/3] the pinned requirements", ["0"])
    out = capsys.readouterr().out
    assert "Collecting torch==2.13.0" in out and "Successfully installed torch-2.13.0" in out
    assert "still working" in out and "WARNING" not in out
    with pytest.raises(SystemExit, match="pip failed"):
        course.pip("[2/3] the pinned requirements", ["1"])
    assert "WARNING: Location x is ignored" in capsys.readouterr().err
