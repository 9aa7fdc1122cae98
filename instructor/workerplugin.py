"""The Dask worker plugin every grading run registers first: nbgrader and the judge imported once, in one thread.

A task's arguments are unpickled in a worker's event-loop thread (importing ``instructor.kit`` and with it nbgrader)
while the task before it may be importing nbgrader in the executor thread (:func:`instructor.task.warm_up`).  Two
threads importing nbgrader's circular package at once can hand one of them a partially initialised module
(``cannot import name 'InstantiateTests' from partially initialized module 'nbgrader.preprocessors'``): the worker
dies and the canary scores 0 (seen once in the quick tier).  ``Client.register_plugin`` runs :meth:`setup` on every
worker, present and joining, before it returns, so every import below is done before the first task arrives."""
from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin


class ImportsFirst(WorkerPlugin):
    name = "attncourse-imports-first"
    idempotent = True

    def setup(self, worker=None):
        import nbgrader.apps  # noqa: F401
        import nbgrader.preprocessors  # noqa: F401

        import judge.preprocessors  # noqa: F401
        import instructor.task  # noqa: F401


def imports_first(client) -> None:
    """Register :class:`ImportsFirst` on ``client``'s workers (idempotent: a second run on the same cluster is free)."""
    client.register_plugin(ImportsFirst())
