CORRECT = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights
'''
# a real mistake: the scores are not scaled (fails the hidden values, passes the visible shapes)
WRONG = CORRECT.replace(" / math.sqrt(d_k)", "")


def drop_cell(nb, grade_id):
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != grade_id]
    return nb


def set_cell(nb, grade_id, source):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            c.source = source
    return nb


# -- for the tricks that try to take the expected outputs from wherever the grader keeps them --------
# FIND_EXPECTED(Q) returns the stored expected (output, weights) whose first input matches Q, from any
# mapping or object the trick can reach (``_holders()`` is defined by each trick), or None.
FINDER = '''
def _looks_like_case(o):
    try:
        return isinstance(o, dict) and o.get("expected") is not None and "args" in o
    except Exception:
        return False

def _as_case(o):
    if _looks_like_case(o):
        return o
    d = getattr(o, "__dict__", None)
    if isinstance(d, dict) and d.get("expected") is not None and d.get("args") is not None:
        return d
    return None

def FIND_EXPECTED(Q):
    import torch
    for holder in _holders():
        spec = _as_case(holder)
        if spec is None:
            continue
        try:
            a = spec["args"][0]
            if tuple(a.shape) == tuple(Q.shape) and torch.allclose(a.double(), Q.detach().cpu().double(), atol=1e-2):
                out, w = spec["expected"]
                return out.to(Q.dtype).to(Q.device), w.to(Q.dtype).to(Q.device)
        except Exception:
            continue
    return None

_wrong_sdpa = scaled_dot_product_attention

def scaled_dot_product_attention(Q, K, V, mask=None):
    if str(Q.device) != "meta":
        found = FIND_EXPECTED(Q)
        if found is not None:
            return found
    return _wrong_sdpa(Q, K, V, mask)
'''
