"""Kills its own kernel (SIGKILL) when first called: nothing can be graded; the report says why."""
BATCH, EXPECT, OTHERS = "faults", "nothing", False
SDPA = '''
import os, signal
def scaled_dot_product_attention(Q, K, V, mask=None):
    os.kill(os.getpid(), signal.SIGKILL)
'''
REASON = "kernel died"
