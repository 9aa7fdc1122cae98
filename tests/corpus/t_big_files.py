"""Writes 3 x 150 MB files into its working folder and /tmp while graded: nothing of them comes back."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
for _i, _where in enumerate(["big0.bin", "big1.bin", "/tmp/big2.bin"]):
    try:
        with open(_where, "wb") as _f:
            for _ in range(150):
                _f.write(b"\\0" * (1 << 20))
    except OSError:
        pass
'''
SHOWS = "Most likely cause"
