"""Takes every task it can: threads with small stacks until the kernel refuses, held while grading goes on.

A red team's notebook made 2,991 threads in 0.57 s and every student graded beside it scored 0: nothing limited a
kernel's tasks (no pids cgroup; RLIMIT_NPROC does not hold where the grader is root). Now each kernel's PID
namespace holds at most its budget (ATTNCOURSE_KERNEL_TASKS + 300, its pid_max): the bomb stops there, alone
(tests/test_kernel_budget.py runs it beside an honest kernel). Its own kernel may not survive holding every task
it may have (ipykernel needs a thread now and then): then it earns nothing; where it survives (CI's full suite
saw it score 17, the plain mistake's score) it earns no more than the mistake it carries.  Either way the correct
submission graded in the same batch keeps full marks.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "faults", "no_more_than_wrong", False
SDPA = WRONG + '''
import threading as _t, time as _time
_t.stack_size(65536)
_go = _t.Event()
_held = 0
try:
    while _held < 5000:
        _t.Thread(target=_go.wait, args=(3,), daemon=True).start()
        _held += 1
except RuntimeError:
    pass
'''
