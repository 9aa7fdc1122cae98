"""Authoring a section: from its source notebook to the reference data, the release and the self-study copy.

``./course build NN`` (:mod:`authoring.build`); the reference builder (:mod:`authoring.references`);
release and self-study generation (:mod:`authoring.generate`); the CUDA run of every hidden case
(:mod:`authoring.cuda_check`).
"""
