"""Returns objects whose __eq__/__sub__/__array__ lie instead of tensors."""
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = '''
class Anything:
    def __init__(self, shape): self.shape = shape
    def __eq__(self, other): return True
    def __sub__(self, other): return 0
    def __rsub__(self, other): return 0
    def __abs__(self): return 0
    def __array__(self, *a, **k): return np.zeros(self.shape)

def scaled_dot_product_attention(Q, K, V, mask=None):
    shape_w = (*Q.shape[:-1], K.shape[-2])
    return Anything((*Q.shape[:-1], V.shape[-1])), Anything(shape_w)
'''
SHOWS = "should be a torch.Tensor"
REASON = "dunders"
