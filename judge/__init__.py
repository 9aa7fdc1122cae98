"""What runs in the nbgrader process, where no student code runs.

The verdict on a record (:mod:`.verdict`, :mod:`.diagnose`), nbgrader's preprocessors around the
kernel (:mod:`.preprocessors`), the sandbox kernels start in (:mod:`.sandbox`), files read without
following links (:mod:`.files`, :mod:`.nbgrader_hooks`), the scratch course a submission is graded in
(:mod:`.scratch`) and the reader of autograded notebooks (:mod:`.autograded`).
"""
