"""Test settings: plotting off-screen, transformers offline (the course never reaches a model hub)."""
import os

import pytest

# tests/browser.py is both a helper module and a plugin (pytest_plugins in the browser and hub tests): rewrite its
# asserts when first imported, so registering it as a plugin afterwards does not warn "already imported".
pytest.register_assert_rewrite("tests.browser")

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
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
