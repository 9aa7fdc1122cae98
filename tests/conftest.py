"""Test settings: plotting off-screen, transformers offline (the course never reaches a model hub)."""
import os

import pytest

# tests/browser.py is both a helper module and a plugin (pytest_plugins in the browser and hub tests): rewrite its
# asserts when first imported, so registering it as a plugin afterwards does not warn "already imported".
pytest.register_assert_rewrite("tests.browser")

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _loadgroup(config, items):
    """Keep each ``xdist_group`` on one pytest-xdist worker (``--dist loadgroup``), as ``./course test`` asks.

    pytest-xdist 3.8 tags a grouped test by writing ``item._nodeid``, which pytest 9 no longer reads (a
    node's id lives in ``item._id``): every test became its own unit and a section's gate tests ran on both
    workers, each grading the section again.  This puts the tag where pytest 9 reads it.
    """
    if not getattr(config.option, "loadgroup", False):   # set on xdist workers under --dist loadgroup
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:   # an older pytest, where pytest-xdist's own tag works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


# -- tiers by cost --------------------------------------------------------------------------------
# Every test gets one of four markers (pyproject.toml): unit, kernel, e2e, deploy. ./course test --unit runs the
# unit tier, --quick the tests not marked slow, no flag all of them. A test is marked by its file (the lists below)
# and its fixtures: one that needs no fixture beyond pytest's own cheap ones, in a file of none of the lists, is a
# unit test, and runs with process creation blocked (a unit test that starts a process fails, naming the fix).
# A test marked by hand (@pytest.mark.kernel, e2e, deploy) keeps its marker.
TIERS = ("unit", "kernel", "e2e", "deploy")
FILE_TIER = {
    # the browser, JupyterHub, real accounts, nbgrader's exchange between users
    "deploy": {"test_browser.py", "test_xss_browser.py", "test_hub.py", "test_hub_roster.py", "test_peer_exchange.py",
               "test_course_exchange.py"},
    # the sandbox and the fork server: bwrap, kernels, their limits
    "kernel": {"test_sandbox.py", "test_sandbox_privilege.py", "test_zygote.py", "test_kernel_budget.py",
               "test_kernel_cleanup.py", "test_kernel_etc.py", "test_kernel_output.py", "test_kernel_time.py",
               "test_kernel_tmp.py"},
    # nbgrader end to end: gates, class grading, tamper, faults, self-check, the bench
    "e2e": {"test_gates.py", "test_classgrade.py", "test_tamper.py", "test_faults.py", "test_engine_cluster.py",
            "test_engine_faults.py", "test_handout.py", "test_diagnosis.py", "test_bench.py", "test_probe_offline.py"},
}
# tests in files of mixed cost, by name (a parametrized test: every case)
TEST_TIER = {
    "e2e": {"test_canvas_export_through_nbgrader", "test_a_display_flood_is_capped_in_the_autograded_notebook",
            "test_an_unfinished_release_says_not_done_yet_and_nothing_else", "test_build_refuses_what_it_cannot_resolve",
            "test_a_new_gradebook_is_the_one_nbgrader_makes", "test_the_package_imports_torch_only_when_asked",
            "test_selfcheck_grades_a_saved_copy", "test_selfcheck_gives_a_trick_no_marks",
            "test_check_says_the_grader_is_broken_when_no_kernel_starts",
            # rebuilds each section's reference data in this process (section 11: 30 s)
            "test_reference_data_in_sync_with_spec",
            # the in-process Grader's verdicts come from the checkout's judge in a process of its own
            # (python -m judge.selfcheck --verdicts), and pip builds the student's wheel
            "test_check_now_judges_what_the_kernel_holds",
            "test_an_in_process_grader_asks_the_checkouts_judge_in_a_process_of_its_own",
            "test_the_students_wheel_carries_no_judge"},
    "kernel": {"test_isolated_execute_names_the_cell_that_timed_out",
               "test_triton_mode_interprets_a_library_imported_with_the_compiler_on",
               "test_counting_a_compiled_kernel_runs_it_interpreted_then_puts_it_back",
               "test_a_kernel_forked_for_grading_interprets_inside_the_sandbox"},
}
# fixtures that grade a whole class (on both engines): a test that needs one is left out of the quick tier
SLOW_FIXTURES = {"runs", "class_grading", "graded_class"}
# pytest's own fixtures that start nothing
CHEAP_FIXTURES = {"request", "tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory", "monkeypatch", "capsys",
                  "capsysbinary", "capfd", "capfdbinary", "caplog", "recwarn", "pytestconfig", "worker_id",
                  "testrun_uid", "record_property", "doctest_namespace", "subtests"}


def tier_of(item) -> str:
    hand = [t for t in TIERS if item.get_closest_marker(t)]
    if hand:
        return hand[0]
    name = item.path.name
    for tier, tests in TEST_TIER.items():
        if item.originalname in tests:
            return tier
    for tier, files in FILE_TIER.items():
        if name in files:
            return tier
    params = set(getattr(getattr(item, "callspec", None), "params", {}))
    fixtures = set(getattr(item, "fixturenames", ())) - params - CHEAP_FIXTURES
    return "e2e" if fixtures else "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(tier)
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("slow"):
            item.add_marker("slow")
    _loadgroup(config, items)


def _matplotlib_fonts_found():
    """matplotlib's first use by an account lists the system's fonts with ``fc-list`` (a process) and caches them
    in ~/.cache/matplotlib: done here, outside the guard, so a unit test that draws runs the same for a new user
    (a fresh account's unit tier failed four tests on it)."""
    try:
        import matplotlib.font_manager  # noqa: F401  (builds the cache once per account)
    except ImportError:
        pass


class _NoProcesses:
    """While a unit test runs: starting a process raises (the test belongs to another tier)."""

    def __init__(self, item):
        self.item, self.undo, self.tried = item, [], False
        self.why = (f"{item.nodeid} is in the unit tier (tests/conftest.py) but starts a process: add its name to "
                    "TEST_TIER there, or mark it @pytest.mark.kernel or @pytest.mark.e2e")

    def _refuse(self, *_a, **_k):
        self.tried = True
        raise RuntimeError(self.why)

    def __enter__(self):
        import multiprocessing.util
        import subprocess

        _matplotlib_fonts_found()

        for owner, name in ((subprocess.Popen, "_execute_child"), (os, "fork"), (os, "system"), (os, "posix_spawn"),
                            (os, "posix_spawnp"), (multiprocessing.util, "spawnv_passfds")):
            if hasattr(owner, name):
                self.undo.append((owner, name, getattr(owner, name)))
                setattr(owner, name, self._refuse)
        return self

    def __exit__(self, *exc):
        for owner, name, old in reversed(self.undo):
            setattr(owner, name, old)


def _guarded(item):
    if not item.get_closest_marker("unit"):
        return (yield)
    with _NoProcesses(item) as guard:
        result = yield
    if guard.tried:   # refused even where the test caught the error (and skipped, or took another path)
        raise RuntimeError(guard.why)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))
