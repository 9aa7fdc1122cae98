"""Plain mistake: the function raises."""
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    raise ValueError("not done yet")
'''
SHOWS = "raised ValueError: not done yet"
