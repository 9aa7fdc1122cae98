"""Property checks: graded behaviour that any correct answer has, whatever its exact numbers.

A hidden case of kind ``property`` names the properties to check in its
``labels``; its stored input must be a tensor of shape ``(2, T, d)`` whose
first row repeats one query vector at every position and whose second row
repeats one key vector (``x[0, t] = q``, ``x[1, t] = k``).  For a rotary
position encoding ``f`` (positions on the second-to-last axis):

* ``norms``    -- every output vector keeps its input's length (a rotation);
* ``relative`` -- ``f(x)[0, m] · f(x)[1, n]`` depends on ``m - n`` only;
* ``moves``    -- it does depend on the offset (the identity is not an encoding).

Numbers are compared through :mod:`attncourse.trusted` and NumPy functions
captured when this module is imported (from the locked setup cell).
"""
from __future__ import annotations

import numpy as _np

from . import trusted as T

_matmul = _np.matmul
_sqrt = _np.sqrt
_sum = _np.sum
_amax = _np.amax

MESSAGES = {
    "norms": ("the output vectors do not keep their length. A rotation changes only directions: each pair must "
              "become (a·cos − b·sin, a·sin + b·cos) with the cos and sin of one angle; nothing may be added or "
              "scaled."),
    "relative": ("the dot product of a rotated query at position m with a rotated key at position n changes with "
                 "m and n themselves, not only with m − n. Position t (its index on the second-to-last axis, "
                 "from 0) must rotate pair i by t·θ_i, with the same θ_i for every position and input."),
    "moves": ("the result does not change with position: position t must rotate each pair by t·θ_i, with "
              "positions taken from the second-to-last axis."),
}


def check_property(grader, answer, spec, context):
    """Run ``answer`` on the stored input and check the properties named in ``spec['labels']``.

    Returns None when every property holds, else the problem (no reference values shown).
    """
    if not T.callable_(answer):
        return f"expected a function, got {T.describe_type(answer)}"
    device = grader._device(spec)
    dtype = T.FLOAT_DTYPES[spec.get("dtype", "float32")]
    x = grader._materialise(spec["args"][0], dtype, device, True, context)
    with T.t_no_grad():
        got, exc = grader._guarded(answer, x)
    if exc is not None:
        return grader._explain_exception(exc, device, spec)
    atol, rtol = grader._tolerance(spec, device, dtype)
    expected_shape = T.tensor_to_numpy(spec["args"][0])
    problem, y = grader._compare_part(got, expected_shape, "the output", "torch", device, dtype, atol, rtol, False)
    if problem:
        return problem
    x_np = T.tensor_to_numpy(spec["args"][0])
    for name in spec.get("labels") or []:
        if not _holds(name, x_np, y, atol, rtol):
            return f"a property of rotary encodings fails: {MESSAGES[name]}"
    return None


def _holds(name, x, y, atol, rtol):
    if name == "norms":
        nx = _sqrt(_sum(x * x, axis=-1))
        ny = _sqrt(_sum(y * y, axis=-1))
        return T.close(ny, nx, atol, rtol)
    scores = _matmul(y[0], y[1].T)                      # (T, T): query at m, key at n
    scale = float(_amax(T.np_abs(scores))) + 1.0
    tol = atol * scale + rtol * scale
    shifted, base = scores[1:, 1:], scores[:-1, :-1]     # (m+1, n+1) against (m, n)
    if name == "relative":
        return T.close(shifted, base, tol, 0.0)
    if name == "moves":
        down = T.np_abs(scores[1:, :] - scores[:-1, :])  # move the query, keep the key
        return float(_amax(down)) > 10 * tol
    raise T.ValueError_(f"unknown property {name!r}")
