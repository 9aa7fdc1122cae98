"""Section 08's held-out numbers are held out: no training batch of the notebook contains one.

The notebook claims that the model is tested on numbers it has never seen. These tests run the notebook's own
given code (read from the source notebook's cells, as the graders do) and check the claim on the very batches
the training cell draws, and that the training and evaluation cells use that given code.
"""
import math

import nbformat
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from graders.spec import COURSE, source_cells

SECTION = "08_train_and_generate"


@pytest.fixture(scope="module")
def given():
    """The namespace of the notebook's given task cell."""
    ns = {"math": math, "np": np, "torch": torch, "nn": nn, "F": F}
    exec(source_cells(SECTION)["given_task"], ns)
    return ns


@pytest.fixture(scope="module")
def code_cells():
    nb = nbformat.read(COURSE / "source" / SECTION / f"{SECTION}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _one_cell(cells, needle):
    hits = [c for c in cells if needle in c]
    assert len(hits) == 1, f"expected one code cell containing {needle!r}, found {len(hits)}"
    return hits[0]


def test_number_keys_name_numbers(given):
    """Two rows get the same key exactly when they hold the same number (length and digits)."""
    keys = given["number_keys"]
    P, S = given["PAD"], given["SEP"]
    rows = torch.tensor([
        [P, P, 0, 4, 7, S, 7, 4, 0, P, P],      # 047
        [P, 0, 0, 4, 7, S, 7, 4, 0, 0, P],      # 0047: another number
        [P, P, 0, 4, 7, S, 7, 4, 0, P, P],      # 047 again
        [P, P, 7, 4, 0, S, 0, 4, 7, P, P],      # 740
    ])
    k = keys(rows).tolist()
    assert k[0] == k[2] and len({k[0], k[1], k[3]}) == 3


def test_held_out_is_1000_different_numbers(given):
    held = given["HELD_OUT"]
    assert held.shape == (1000, given["SEQ_LEN"])
    assert len(set(given["number_keys"](held).tolist())) == 1000


def test_no_training_batch_holds_a_held_out_number(given):
    """The exact batches of the notebook's training loop (TRAIN_STEPS x BATCH_SIZE, seed TRAIN_SEED)."""
    keys, reserved = given["number_keys"], set(given["number_keys"](given["HELD_OUT"]).tolist())
    data = torch.Generator().manual_seed(given["TRAIN_SEED"])
    drawn = torch.cat([given["training_batch"](given["BATCH_SIZE"], data) for _ in range(given["TRAIN_STEPS"])])
    assert len(drawn) == given["TRAIN_STEPS"] * given["BATCH_SIZE"]
    assert not reserved & set(keys(drawn).tolist())
    # the sampler had to redraw: without it, the same stream holds held-out numbers
    raw = given["reversal_batch"](len(drawn), torch.Generator().manual_seed(given["TRAIN_SEED"]))
    assert reserved & set(keys(raw).tolist())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampler_never_draws_a_held_out_number(given, seed):
    keys, reserved = given["number_keys"], set(given["number_keys"](given["HELD_OUT"]).tolist())
    drawn = given["training_batch"](50_000, torch.Generator().manual_seed(seed))
    assert drawn.shape == (50_000, given["SEQ_LEN"])
    assert not reserved & set(keys(drawn).tolist())


def test_notebook_trains_with_the_sampler_and_tests_on_held_out(code_cells):
    train = _one_cell(code_cells, "for step in tqdm(range(TRAIN_STEPS)")
    assert "data = torch.Generator().manual_seed(TRAIN_SEED)" in train
    assert "batch = training_batch(BATCH_SIZE, data)" in train
    assert train.count("data") == 2, "the training generator must be used by the sampler only"
    assert "test = HELD_OUT" in _one_cell(code_cells, "test = ")
    pool = _one_cell(code_cells, "def train_on_pool")
    assert "training_batch(" in pool and "reversal_batch(" not in pool
    for cell in code_cells:   # no cell trains the model on the unfiltered task
        if "reversal_batch(" in cell and "next_token_loss(" in cell and "train_step(" in cell:
            pytest.fail("a cell trains on reversal_batch, which may draw held-out numbers")
