"""The notebook was saved under another name."""
BATCH, EXPECT, OTHERS = "faults", "nothing", False
def build(nb):
    return ("my_attention_copy.ipynb", nb)
REASON = "notebook missing (found my_attention_copy.ipynb)"
