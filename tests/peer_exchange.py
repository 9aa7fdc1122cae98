"""A pytest plugin: nbgrader 0.9.6's own exchange tests, run against the course's exchange on the hub's layout.

``tests/test_peer_exchange.py`` runs nbgrader's test modules (installed with nbgrader: ``nbgrader.tests.apps``,
nothing vendored) in a child pytest with ``-p tests.peer_exchange``. This plugin

* puts ``deploy/course_exchange.py`` in place of nbgrader's exchange for every nbgrader command the tests run
  (a ``nbgrader_config.py`` on ``JUPYTER_CONFIG_PATH``: what ``./course hub`` writes for both roles), and
* gives each test's ``exchange`` the hub's layout (deploy/hub.py ``make_exchange``) for the course ``abc101`` the
  tests use, with the account running them as the instructor and as the one student (nbgrader's tests play
  both roles as one account).

``ATTNCOURSE_PEER_EXCHANGE=nbgrader`` runs the same tests on nbgrader's own exchange (the baseline).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE = "abc101"   # the course id nbgrader's exchange tests use


def _ours() -> bool:
    return os.environ.get("ATTNCOURSE_PEER_EXCHANGE", "course") != "nbgrader"


@pytest.fixture(autouse=True)
def _course_exchange(monkeypatch, tmp_path_factory):
    """Every nbgrader command of the test uses deploy/course_exchange.py (as on the hub)."""
    if not _ours():
        yield
        return
    sys.path.insert(0, str(ROOT / "deploy"))
    from course_exchange import config_lines

    conf = tmp_path_factory.mktemp("peer-config")
    (conf / "nbgrader_config.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'deploy')!r})\nc = get_config()  # noqa: F821\n"
        + config_lines())
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(conf))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """nbgrader's ``exchange`` fixture (its conftest's: a plugin's fixture would not override it), with the hub's
    layout made in it (:func:`deploy.hub.make_exchange`)."""
    outcome = yield
    if fixturedef.argname == "exchange" and _ours():
        import pwd

        from deploy.hub import make_exchange

        me = pwd.getpwuid(os.getuid()).pw_name
        make_exchange(Path(outcome.get_result()), COURSE, me, [me], root_owner=os.getuid())
