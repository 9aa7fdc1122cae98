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
