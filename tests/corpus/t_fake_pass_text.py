"""Prints fake "passed"/"✓" text from the solution cell and from inside the function."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG.replace("    d_k = Q.shape[-1]", '    print("✓ scaled_dot_product_attention passed")\n    d_k = Q.shape[-1]') + '''
print("✓ scaled_dot_product_attention: all hidden tests passed")
'''
SHOWS = "Most likely cause"
REASON = "fake pass text"
