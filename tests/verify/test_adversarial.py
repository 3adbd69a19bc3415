"""accum.adversarial: the search's matrices and prefix products against plain references, and its rows."""

import math

import numpy as np
import pytest
import torch

from accum import adversarial as adv
from accum.simulations.families import make_family
from accum.simulations.steps import HouseholderSteps
from accum.theory import far


def test_prefix_products_match_a_plain_loop_on_an_odd_length():
    rng = np.random.default_rng(0)
    mats = rng.normal(size=(13, 5, 5))
    got = adv.prefix_products(torch.from_numpy(mats)).numpy()
    want, cur = [], np.eye(5)
    for m in mats:
        cur = m @ cur
        want.append(cur)
    np.testing.assert_allclose(got, np.array(want), rtol=1e-12, atol=1e-12)


def test_householder_matrices_are_the_engine_steps():
    rng = np.random.default_rng(1)
    v, b = rng.normal(size=(7, 5)), rng.normal(size=7)
    a, u, beta = adv.householder_matrices(torch.from_numpy(v), torch.from_numpy(b))
    assert np.all((beta.numpy() > 0) & (beta.numpy() < 2))
    np.testing.assert_allclose(a.numpy(), HouseholderSteps(u.numpy()[None], beta.numpy()[None]).dense()[0], atol=1e-14)


def test_plane_rotations_are_the_exponential_of_their_so_d_element():
    rng = np.random.default_rng(2)
    ra, rb, phi = (torch.from_numpy(x) for x in (rng.normal(size=(6, 7)), rng.normal(size=(6, 7)), rng.normal(size=6)))
    a = adv.plane_rotations(ra, rb, phi)
    u = ra / ra.norm(dim=-1, keepdim=True)
    w = rb - (rb * u).sum(-1, keepdim=True) * u
    w = w / w.norm(dim=-1, keepdim=True)
    k = w[:, :, None] * u[:, None, :] - u[:, :, None] * w[:, None, :]
    np.testing.assert_allclose(a.numpy(), torch.linalg.matrix_exp(phi[:, None, None] * k).numpy(), atol=1e-12)
    np.testing.assert_allclose(a.numpy() @ a.numpy().transpose(0, 2, 1), np.broadcast_to(np.eye(7), (6, 7, 7)),
                               atol=1e-12)


@pytest.mark.parametrize("check", ["adversarial-householder", "adversarial-orthogonal"])
def test_rows_stay_under_the_bound_and_come_close_at_small_n(check):
    """At N = 3, 30 the search reaches the bound within 5% (reflections / rotations by pi are optimal)."""
    from accum.claims import CHECKS

    f = make_family("householder", dim=8)
    rows = CHECKS[check].run(f, np.random.default_rng(0), far_sizes=[3, 30], s0=4.0, iterations=150, starts=1)
    bound = far.lower_bound(np.array([3, 30]), 4.0)
    assert [r.kind for r in rows] == ["adversarial", "adversarial"]
    assert np.all(rows[0].measured <= bound * (1 + 1e-12)) and np.all(rows[0].measured >= 0.95 * bound)
    assert float(rows[1].measured) <= 0


def test_near_weight_is_the_softmax_weight_of_the_near_key():
    path, probe = np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([1.0, 0.0])
    assert adv.near_weight(path, probe, 2.0) == pytest.approx(1 / (1 + math.exp(2 - 2) + math.exp(0 - 2)))
