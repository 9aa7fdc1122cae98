"""Adversarial and broken submissions for section 02 (see tests/test_tamper.py, tests/test_faults.py).

Each module is one submission built from the instructor's notebook (every other
exercise solved correctly) with:
  BATCH   "tamper" or "faults" (one nbgrader autograde run per batch)
  SDPA    code for the solution cell grade_id "sdpa" (optional)
  build   build(nb) -> nb | str | (filename, nb)  to damage the notebook itself (optional)
  EXPECT  "zero": every hidden check of scaled_dot_product_attention scores 0;
          "full": the whole submission keeps full marks;
          "nothing": the submission is not graded at all (score 0)
  OTHERS  True when the other exercises must keep full marks
  SHOWS   text that must appear in the sdpa check feedback (optional)
  REASON  text that must appear in the instructor's report reasons (optional)
"""
