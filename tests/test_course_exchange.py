"""deploy/course_exchange.py without a hub: what collect takes of a submission folder, file by file.

(The exchange with real accounts, each trick played by a student and paired with nbgrader's own exchange, is in
tests/test_hub.py.)"""
from __future__ import annotations

import os

import pytest

from deploy import course_exchange as ex


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "sub"
    d.mkdir()
    (d / "nb.ipynb").write_bytes(b"{}")
    return d


def test_a_regular_file_of_its_owner_is_read(folder):
    assert ex.read_own_file(str(folder / "nb.ipynb"), os.getuid(), 100) == (b"{}", "")


@pytest.mark.parametrize("trick, why", [
    ("symlink", "a link"), ("hardlink", "a hard link"), ("fifo", "not a regular file"),
    ("too_big", "larger than 100 bytes"), ("other_owner", "not the student's own file"), ("missing", "missing"),
])
def test_anything_else_is_left_out_with_its_reason(folder, tmp_path, trick, why):
    target = tmp_path / "instructor-solution.ipynb"
    target.write_bytes(b"### BEGIN SOLUTION")
    path = folder / "x.ipynb"
    if trick == "symlink":
        path.symlink_to(target)
    elif trick == "hardlink":
        os.link(folder / "nb.ipynb", path)
    elif trick == "fifo":
        os.mkfifo(path)
    elif trick == "too_big":
        path.write_bytes(b"x" * 101)
    elif trick == "other_owner":
        path.write_bytes(b"{}")
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(path, 65534, 65534)
    data, reason = ex.read_own_file(str(path), os.getuid(), 100)
    assert data is None and reason == why
    # the pairing: the same file read the ordinary way (what nbgrader's copytree does) gives its bytes
    if trick in ("symlink", "hardlink", "too_big", "other_owner"):
        assert path.read_bytes()


def test_config_lines_name_every_operation_of_nbgrader():
    from nbgrader.exchange.exchange_factory import ExchangeFactory

    kinds = set(ExchangeFactory.class_trait_names(config=True))
    lines = ex.config_lines()
    assert {k for k in kinds if f"c.ExchangeFactory.{k} = 'course_exchange." in lines} == kinds, lines
