"""What the notebooks use to teach: plots, ``compare``, seeding, devices, offline model loading, the probe, the
small models that sections 04 (``heads``: the split/merge bug measured) and 09 (``gpt``) train, and the memory
count of section 10 (``memory``: the largest tensor a computation allocates; ``meter``: the peak of live bytes, measured
on the CPU by a dispatcher mode and on a GPU by the allocator, sections 04 and 10), and ``progress`` (``needs``: a cell that
uses an unfinished exercise says which one, once, instead of failing on something else)."""
