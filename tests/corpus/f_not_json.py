"""A notebook file that is not valid JSON."""
BATCH, EXPECT, OTHERS = "faults", "nothing", False
def build(nb):
    return '{"cells": [ {"cell_type": "code", "source": "oops'
REASON = "notebook is not valid JSON"
