"""os._exit() inside the graded function: blocked while grading, the kernel survives."""
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = '''
import os
def scaled_dot_product_attention(Q, K, V, mask=None):
    os._exit(0)
'''
SHOWS = "SystemExit"
REASON = "exit the interpreter"
