"""Returns a torch.Tensor subclass whose comparisons and arithmetic lie."""
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = '''
class Liar(torch.Tensor):
    def __eq__(self, other): return True
    def __sub__(self, other): return torch.zeros(self.shape)
    def allclose(self, *a, **k): return True
    def __array__(self, *a, **k): return np.zeros(self.shape)

def scaled_dot_product_attention(Q, K, V, mask=None):
    w = torch.softmax(Q @ K.transpose(-2, -1), dim=-1)
    return (w @ V).as_subclass(Liar), w.as_subclass(Liar)
'''
SHOWS = "should be a torch.Tensor"
REASON = "subclass"
