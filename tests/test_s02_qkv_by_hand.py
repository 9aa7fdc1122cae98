"""Section 02's measured claims: the RNN's gradient from token 0 fades with the number of steps, and the
spread of q·k is √d for independent unit-variance components (the predict-then-measure answer, 8 for 64)."""
import math

import numpy as np
import torch


def test_rnn_jacobian_from_token_0_fades_geometrically():
    torch.manual_seed(0)                                   # the notebook's seed_everything(0) seeds torch too
    T, d = 512, 64
    x = torch.randn(T, d)
    W_x, W_h = torch.randn(d, d) / 8, torch.randn(d, d) / 8

    def rnn_state(x0, n_steps):
        h = torch.zeros(d)
        for t in range(n_steps):
            h = torch.tanh((x0 if t == 0 else x[t]) @ W_x + h @ W_h)
        return h

    norms = [torch.linalg.matrix_norm(torch.autograd.functional.jacobian(lambda x0: rnn_state(x0, n), x[0])).item()
             for n in (1, 16, 64)]
    assert norms[1] < 0.1 * norms[0] and norms[2] < 1e-6 * norms[0], norms


def test_spread_of_q_dot_k_is_sqrt_d():
    rng = np.random.default_rng(0)
    for d in (4, 64):
        dots = (rng.normal(size=(20000, d)) * rng.normal(size=(20000, d))).sum(axis=1)
        assert abs(dots.std() - math.sqrt(d)) < 0.05 * math.sqrt(d)
