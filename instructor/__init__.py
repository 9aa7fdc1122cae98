"""The instructor's grading operations: ``./course grade`` (serial or Dask), the gradebook merge, the class report.

Apart from authoring (:mod:`authoring`), and from the student package (:mod:`attncourse`), which it uses.
"""
