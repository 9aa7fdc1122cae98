"""Instructor-only grading material: hidden cases, reference code, known mistakes.

Not part of the student package (``pip install .`` installs ``attncourse``
only) and never copied into ``release/`` or ``notebooks/``.
"""
import importlib

from attncourse.course import SECTIONS


def load_section(name: str):
    """The :class:`graders.spec.Section` of a section id such as ``02_qkv_by_hand``."""
    return importlib.import_module(f"graders.s{name}").SECTION


def available_sections():
    """Section ids that have a grader module."""
    out = []
    for name in SECTIONS:
        try:
            importlib.import_module(f"graders.s{name}")
        except ModuleNotFoundError:
            continue
        out.append(name)
    return out
