"""What crosses between the student's kernel and the judge: stored cases, records, ``GRADER.check`` calls."""
