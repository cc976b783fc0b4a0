"""Imani et al.'s alignment curve and Roy & Vetterli's effective rank."""

import numpy as np
import pytest
import torch

from prh.metrics import alignment_curve, effective_rank


def test_effective_rank_of_flat_and_single_spikes():
    assert effective_rank(np.eye(5)) == pytest.approx(np.log(5))
    assert effective_rank(np.eye(5), exp=True) == pytest.approx(5)
    assert effective_rank(np.outer([1.0, 2, 3], [4.0, 5])) == pytest.approx(0, abs=1e-12)
    assert effective_rank([3.0, 0.0, 0.0], exp=True) == pytest.approx(1)


@pytest.mark.parametrize("r", [1, 3, 6])
def test_effective_rank_of_a_rank_r_matrix_with_equal_singular_values_is_log_r(r):
    """Rank r inside a larger matrix (zero singular values present), rotated on both sides."""
    rng = np.random.default_rng(r)
    q1, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    q2, _ = np.linalg.qr(rng.normal(size=(9, 9)))
    m = q1[:, :r] @ (2.5 * np.eye(r)) @ q2[:, :r].T
    assert effective_rank(m) == pytest.approx(np.log(r), abs=1e-9)
    assert effective_rank(m, exp=True) == pytest.approx(r, rel=1e-9)


def test_effective_rank_from_a_matrix_equals_from_its_singular_values_and_ignores_scale():
    a = np.random.default_rng(0).normal(size=(20, 7))
    s = np.linalg.svd(a, compute_uv=False)
    p = s / s.sum()
    assert effective_rank(a) == pytest.approx(-(p * np.log(p)).sum())
    assert effective_rank(torch.as_tensor(a) * 10) == pytest.approx(effective_rank(s[::-1]))
    assert 1 < effective_rank(a, exp=True) < 7


@pytest.mark.parametrize("bad", [np.zeros((3, 3)), np.array([1.0, -1.0]), np.ones((2, 2, 2))])
def test_effective_rank_rejects_what_it_cannot_measure(bad):
    with pytest.raises(ValueError, match="matrix_or_singular_values|zero matrix|non-negative"):
        effective_rank(bad)


def direct_curve(phi, y, taus):
    """Eq. 2 with the full n x n U (zero singular values padded), as written in the paper."""
    phi = np.concatenate([phi, np.ones((len(phi), 1))], axis=1)
    phi = phi / np.linalg.norm(phi, axis=1, keepdims=True)
    u, s, _ = np.linalg.svd(phi, full_matrices=True)
    s = np.concatenate([s, np.zeros(len(phi) - len(s))])
    return np.array([((u.T @ y) ** 2)[s >= t].sum() for t in taus])


def test_alignment_curve_matches_the_full_svd_and_starts_at_the_norm_of_y():
    rng = np.random.default_rng(1)
    phi, y = rng.normal(size=(40, 6)), np.sign(rng.normal(size=40))
    taus = np.array([0.0, 0.5, 1.0, 2.0, 4.0, 10.0])
    curve = alignment_curve(phi, y, taus)
    np.testing.assert_allclose(curve, direct_curve(phi, y, taus), atol=1e-10)
    assert curve[0] == pytest.approx(40)  # ‖y‖², the part outside the column space included
    assert curve[1] < 40 and curve[-1] == 0
    assert np.all(np.diff(curve) <= 1e-12)


def test_labels_along_the_top_principal_direction_are_more_aligned():
    """Imani et al. figure 4: two clusters on the unit circle at π/4 and −3π/4."""
    rng = np.random.default_rng(2)
    angles = np.concatenate([rng.normal(np.pi / 4, 0.3, 500), rng.normal(-3 * np.pi / 4, 0.3, 500)])
    phi = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    along = np.where(phi @ [1, 1] > 0, 1.0, -1.0)  # split along the spread direction v1
    across = np.where(phi @ [1, -1] > 0, 1.0, -1.0)  # split along v2
    s = np.linalg.svd(phi, compute_uv=False)
    tau = np.sqrt(s[0] * s[1])  # between σ2 and σ1 (no constant column here)
    good, bad = (alignment_curve(phi, y, [tau], add_constant=False)[0] for y in (along, across))
    assert good > 0.8 * 1000 > bad
