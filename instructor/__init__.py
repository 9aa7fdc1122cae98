"""The instructor's grading operations: ``./course grade`` (one engine, serial or on Dask), the gradebook's one writer, the class report.

Apart from authoring (:mod:`authoring`), and from the student package (:mod:`attncourse`), which it uses.
"""
