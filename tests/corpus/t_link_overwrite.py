"""While graded, replaces the files in its working folder with links: to another student's notebook, to the
gradebook, to the reference data.

When kernels worked in the folder nbgrader then wrote to (as the instructor, following links), this made
nbgrader write the autograded notebook over another student's submission or over gradebook.db, chmod the
gradebook read-only, and copy the reference data into feedback.  Now the kernel's working folder is a scratch
folder that is deleted after it: the links go with it.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
import os
for _name, _target in [("02_qkv_by_hand.ipynb", "../../correct/02_qkv_by_hand/02_qkv_by_hand.ipynb"),
                       ("victim.ipynb", "../../../submitted/correct/02_qkv_by_hand/02_qkv_by_hand.ipynb"),
                       ("timestamp.txt", "../../../gradebook.db"), ("gradebook.db", "../../../gradebook.db"),
                       ("ref.pt", "../../../graders/data/02_qkv_by_hand.pt")]:
    try:
        if os.path.lexists(_name):
            os.remove(_name)
        os.symlink(_target, _name)
    except OSError:
        pass
'''
SHOWS = "Most likely cause"
