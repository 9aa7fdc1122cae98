"""Caps on what a grading kernel may put in the notebook, enforced as each output arrives.

nbgrader's ``LimitOutput`` counts stream lines only, and runs after the notebook has
run, when every output is already in memory: a cell that displays a 1 MB image
2000 times made a 1.15 GB autograded notebook (nbgrader at 1.9 GB resident).
:class:`OutputCaps` (mixed into :class:`~judge.preprocessors.IsolatedExecute`)
overrides nbclient's per-message hooks instead, so nothing over the caps is ever held:

* every kind of output (stream text, display data and results, errors, display
  updates) counts against a budget per cell (bytes and number of outputs) and one
  per notebook (bytes).  Consecutive chunks of one stream are merged as they come
  (one output, as a frontend shows them).  Once a cell's budget is spent, its
  further outputs are dropped and one marker output (plain-text display data, so
  that ``LimitOutput`` keeps it) says how many and how large.  A stream chunk that
  does not fit is cut to what fits; any other output that does not fit (a huge
  image) is dropped whole.  ``clear_output`` frees what it clears.
* past the budget a cell still keeps its first error and its first stderr chunk,
  cut short: nbgrader scores a grade cell with either 0, and a flood must not
  hide them.
* the grader's records (display data of :data:`~attncourse.protocol.records.MIME`)
  are never dropped for other outputs' sake: they have their own, generous budget
  (a correct answer's record is at most ~150 kB, and no cell makes more than five).
  A record over it is dropped and the cell is named in
  ``resources["attncourse_caps"]["records"]``; :class:`JudgeRecords` scores that cell 0.
* widget messages (``comm_*``) are ignored: the course uses no widgets, and their
  state would otherwise be kept in memory unbounded.

Sizes are counted in characters of the JSON the notebook will hold (the kernel's
messages have been decoded by then; each one is dropped as soon as it is judged).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from nbformat.notebooknode import NotebookNode
from traitlets import Integer
from traitlets.config import LoggingConfigurable

from attncourse.protocol.records import MIME

MB = 1_000_000
KEPT_SHORT = 4000        # past the budget, a cell's first error / stderr chunk is kept cut to this size
RESOURCES_KEY = "attncourse_caps"


@dataclass
class _Cell:
    outputs: int = 0           # outputs kept (a merged stream chunk is not a new output)
    bytes: int = 0             # their size, display updates charged here too
    records: int = 0
    record_bytes: int = 0
    dropped: int = 0
    dropped_bytes: int = 0
    closed: bool = False       # the budget is spent: every later output is dropped
    kept_error: bool = False
    kept_stderr: bool = False
    marker: NotebookNode | None = None


def _value_size(v) -> int:
    if isinstance(v, str):
        return len(v)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return sum(len(x) for x in v)
    try:
        return len(json.dumps(v, default=str))
    except (TypeError, ValueError):
        return len(repr(v))


def message_size(msg: dict) -> int:
    """The size an output message would take in the notebook (characters of its text, data, traceback)."""
    c = msg.get("content") or {}
    kind = msg.get("msg_type")
    if kind == "stream":
        return _value_size(c.get("text", ""))
    if kind == "error":
        return sum(_value_size(c.get(k, "")) for k in ("ename", "evalue", "traceback"))
    return sum(_value_size(v) for v in (c.get("data") or {}).values()) + _value_size(c.get("metadata") or {})


def _human(n: int) -> str:
    return f"{n / MB:.1f} MB" if n >= 100_000 else f"{n / 1000:.1f} kB"


def _shorten(msg: dict) -> None:
    """Cut an error or stderr message (in place) to about KEPT_SHORT characters."""
    c = msg["content"]
    if msg["msg_type"] == "stream":
        c["text"] = str(c.get("text", ""))[:KEPT_SHORT]
        return
    c["evalue"] = str(c.get("evalue", ""))[:KEPT_SHORT // 4]
    tb = [str(line)[:KEPT_SHORT // 20] for line in c.get("traceback") or []]
    c["traceback"] = tb if len(tb) <= 10 else tb[:5] + ["... traceback cut by the grader ..."] + tb[-5:]


class OutputCaps(LoggingConfigurable):
    """nbclient output hooks that cap every output kind per cell and per notebook (see the module's docstring)."""

    max_output_bytes = Integer(2 * MB, help="one output at most (a longer stream chunk is cut, "
                               "a larger image or display is dropped)").tag(config=True)
    max_cell_bytes = Integer(4 * MB, help="all outputs of one cell (records excepted)").tag(config=True)
    max_cell_outputs = Integer(300, help="number of outputs of one cell (records excepted)").tag(config=True)
    max_notebook_bytes = Integer(20 * MB, help="all outputs of the notebook (records excepted)").tag(config=True)
    max_cell_records = Integer(50, help="grader records in one cell (a cell makes at most 5)").tag(config=True)
    max_cell_record_bytes = Integer(32 * MB, help="grader records of one cell").tag(config=True)
    max_notebook_record_bytes = Integer(128 * MB, help="grader records of the notebook").tag(config=True)

    # -- state, one notebook at a time -----------------------------------------------------------------
    def reset_caps(self) -> None:
        self._caps: dict[int, _Cell] = {}
        self._caps_bytes = 0          # notebook total (records excepted)
        self._caps_record_bytes = 0
        self._caps_overflow: dict[int, str] = {}   # cell index -> why its records were cut
        self._caps_cell_index = None

    def caps_report(self) -> dict:
        """What the caps did, for ``resources[RESOURCES_KEY]``: cells whose records were cut, outputs dropped."""
        dropped = {i: (s.dropped, s.dropped_bytes) for i, s in self._caps.items() if s.dropped}
        return {"records": dict(self._caps_overflow), "dropped": dropped}

    def _cell_caps(self, cell_index: int) -> _Cell:
        if not hasattr(self, "_caps"):
            self.reset_caps()
        return self._caps.setdefault(cell_index, _Cell())

    def _free(self, cell_index: int) -> None:
        """The cell's outputs were cleared: their budget is free again."""
        s = self._caps.pop(cell_index, None) if hasattr(self, "_caps") else None
        if s is not None:
            self._caps_bytes -= s.bytes
            self._caps_record_bytes -= s.record_bytes

    # -- nbclient's hooks ---------------------------------------------------------------------------------
    def process_message(self, msg, cell, cell_index):
        self._caps_cell_index = cell_index    # _update_display_id is not told the cell
        return super().process_message(msg, cell, cell_index)

    def handle_comm_msg(self, outs, msg, cell_index) -> None:
        """Widget messages are ignored (no widget state, no Output-widget capture around the caps)."""

    def clear_output(self, outs, msg, cell_index) -> None:
        super().clear_output(outs, msg, cell_index)
        if not outs:
            self._free(cell_index)

    def output(self, outs, msg, display_id, cell_index):
        if self.clear_before_next_output:   # nbclient's delayed clear, done first so that the budget sees it
            outs[:] = []
            self.clear_display_id_mapping(cell_index)
            self.clear_before_next_output = False
            self._free(cell_index)
        s = self._cell_caps(cell_index)
        kind = msg["msg_type"]
        content = msg["content"]
        size = message_size(msg)
        if kind in ("display_data", "execute_result") and MIME in (content.get("data") or {}):
            return self._record(outs, msg, display_id, cell_index, s, size)

        stream = content.get("name") if kind == "stream" else None
        last = outs[-1] if outs else None
        merge = stream is not None and last is not None and last is not s.marker \
            and last.get("output_type") == "stream" and last.get("name") == stream
        essential = (kind == "error" and not s.kept_error) or (stream == "stderr" and not s.kept_stderr)
        room = min(self.max_output_bytes, self.max_cell_bytes - s.bytes, self.max_notebook_bytes - self._caps_bytes)
        full = s.closed or (not merge and s.outputs >= self.max_cell_outputs)
        if full or size > room:
            if stream is not None and not full and room > 0:   # a stream is cut to what fits
                content["text"] = str(content.get("text", ""))[:room]
                self._drop(outs, s, 0, size - room)
                size = room
            elif essential:
                _shorten(msg)
                self._drop(outs, s, 0, size)
                size = message_size(msg)
            else:
                self._drop(outs, s, 1, size)
                return None
        s.bytes += size
        self._caps_bytes += size
        s.kept_error |= kind == "error"
        s.kept_stderr |= stream == "stderr"
        if merge:
            last["text"] += content.get("text", "")
            return last
        s.outputs += 1
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg) -> None:
        """update_display_data (or a display reusing an id) rewrites every output of that id: charged for each."""
        targets = sum(len(v) for v in self._display_id_map.get(display_id, {}).values())
        if not targets:
            return
        index = self._caps_cell_index if self._caps_cell_index is not None else -1
        s = self._cell_caps(index)
        size = message_size(msg)
        room = min(self.max_cell_bytes - s.bytes, self.max_notebook_bytes - self._caps_bytes)
        if MIME in ((msg.get("content") or {}).get("data") or {}) or s.closed or size > self.max_output_bytes \
                or size * targets > room:
            outs = self.nb["cells"][index]["outputs"] if 0 <= index < len(self.nb["cells"]) else None
            self._drop(outs, s, 1, size * targets)
            return
        s.bytes += size * targets
        self._caps_bytes += size * targets
        super()._update_display_id(display_id, msg)

    # -- helpers ------------------------------------------------------------------------------------------
    def _record(self, outs, msg, display_id, cell_index, s: _Cell, size: int):
        if s.records >= self.max_cell_records:
            why = f"more than {self.max_cell_records} grader records came back from this cell"
        elif s.record_bytes + size > self.max_cell_record_bytes:
            why = f"the grader records of this cell came to more than {_human(self.max_cell_record_bytes)}"
        elif self._caps_record_bytes + size > self.max_notebook_record_bytes:
            why = f"the grader records of this notebook came to more than {_human(self.max_notebook_record_bytes)}"
        else:
            s.records += 1
            s.record_bytes += size
            self._caps_record_bytes += size
            return super().output(outs, msg, display_id, cell_index)
        self._caps_overflow.setdefault(cell_index, why)   # the judge scores the cell 0 and says why
        return None

    def _drop(self, outs, s: _Cell, n: int, size: int) -> None:
        """Count what was dropped or cut; the cell is closed; its one marker (added the first time) says so."""
        s.closed = True
        s.dropped += n
        s.dropped_bytes += size
        text = (f"[output truncated by the grader: {s.dropped} more outputs and {_human(s.dropped_bytes)} dropped "
                f"(limits: {self.max_cell_outputs} outputs and {_human(self.max_cell_bytes)} per cell, "
                f"{_human(self.max_output_bytes)} per output, {_human(self.max_notebook_bytes)} per notebook)]")
        if s.marker is None:
            s.marker = NotebookNode(output_type="display_data", data={"text/plain": text}, metadata={})
            if outs is not None:
                outs.append(s.marker)
        else:
            s.marker["data"]["text/plain"] = text
