"""Gradient descent on linear least squares, in closed form (Imani, Hu & White, Prop. 1).

With the thin SVD Φ = U Σ Vᵀ, batch gradient descent on ‖Φw − y‖² from w_0 = 0,

    w_{t+1} = w_t − η Φᵀ(Φ w_t − y),

moves independently along each right singular vector::

    w_t = Σ_j v_j (1 − (1 − η σ_j²)^t) (u_jᵀ y) / σ_j
    ‖Φ w_t − y‖² = Σ_j (1 − η σ_j²)^{2t} (u_jᵀ y)² + ‖Φ w* − y‖²        (Prop. 1, eq. 3)

(sums over the non-zero σ_j; a zero singular direction gets no gradient). This is
exact for every t, so learning curves at any step count, up to 10⁵ steps and more,
cost one SVD. ``gradient_descent`` runs the iteration itself; the tests check the
two agree to 1e-8 in float64.

Features are prepared as for the alignment curve (section 2): a constant feature
in place of the bias unit, then every row scaled to unit length.

    >>> phi = prepare_features(hidden)
    >>> curves = learning_curves(phi_train, y_train, phi_test, y_test, eta=0.01, steps=[0, 10, 100])
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "prepare_features",
    "label_spectrum",
    "gd_loss_closed_form",
    "gradient_descent",
    "learning_curves",
    "log_steps",
]


def prepare_features(phi, *, add_constant: bool = True, normalize_rows: bool = True) -> np.ndarray:
    """[Φ, 1] with each row scaled to unit L2 norm (the preparation of ``alignment_curve``).

    Parameters
    ----------
    phi : array n × d
    add_constant : append a column of ones (the paper's bias feature)
    normalize_rows : divide each row by its L2 norm (zero rows stay zero)

    Returns
    -------
    np.ndarray n × (d + 1), float64
    """
    a = np.asarray(phi, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"phi must be n x d, got shape {a.shape}")
    if add_constant:
        a = np.concatenate([a, np.ones((a.shape[0], 1))], axis=1)
    if normalize_rows:
        norms = np.linalg.norm(a, axis=1, keepdims=True)
        a = a / np.where(norms > 0, norms, 1.0)
    return a


def label_spectrum(phi, y) -> tuple[np.ndarray, np.ndarray]:
    """Singular values σ_i of the prepared Φ and the label's squared projections (u_iᵀ y)².

    The per-index view of Fig 2 (the alignment curve is its cumulative sum from
    the top: Alignment(Φ, y, σ_k) = Σ_{i ≤ k} (u_iᵀ y)² for distinct σ).

    Returns
    -------
    sigma : np.ndarray (min(n, d + 1),), descending
    proj2 : np.ndarray, same shape
    """
    a = prepare_features(phi)
    t = np.asarray(y, dtype=np.float64).reshape(-1)
    if t.shape[0] != a.shape[0]:
        raise ValueError(f"y must have one entry per row of phi ({a.shape[0]}), got {t.shape[0]}")
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    return s, (u.T @ t) ** 2


def _svd(phi: np.ndarray):
    u, s, vt = np.linalg.svd(phi, full_matrices=False)
    keep = s > s.max(initial=0.0) * max(phi.shape) * np.finfo(np.float64).eps
    return u[:, keep], s[keep], vt[keep]


def _decay(s: np.ndarray, eta: float, steps: np.ndarray) -> np.ndarray:
    """(1 − η σ_j²)^t for every step t (rows) and direction j (columns)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.power((1.0 - eta * s**2)[None, :], np.asarray(steps, dtype=np.float64)[:, None])


def gd_loss_closed_form(phi, y, *, eta: float, steps) -> np.ndarray:
    """‖Φ w_t − y‖² after t GD steps from w_0 = 0, by Proposition 1 (no iteration).

    Parameters
    ----------
    phi : array n × d (used as given: prepare it first if wanted)
    y : array (n,)
    eta : step size; Prop. 1 assumes 0 < η < 1/σ_max² (larger η is computed
        exactly too, oscillating or diverging as GD would)
    steps : sequence of int t ≥ 0

    Returns
    -------
    np.ndarray (len(steps),)
    """
    a, t = _check(phi, y, eta)
    u, s, _ = _svd(a)
    proj2 = (u.T @ t) ** 2
    residual = float(t @ t - proj2.sum())  # ‖Φw* − y‖²: the part of y outside Φ's span
    return (_decay(s, eta, steps) ** 2) @ proj2 + max(residual, 0.0)


def gradient_descent(phi, y, *, eta: float, steps) -> np.ndarray:
    """The same losses by running w ← w − η Φᵀ(Φw − y) step by step (the reference)."""
    a, t = _check(phi, y, eta)
    steps = np.asarray(steps, dtype=np.int64)
    w = np.zeros(a.shape[1])
    out = np.empty(len(steps))
    want = {int(k): [i for i in range(len(steps)) if steps[i] == k] for k in set(steps.tolist())}
    for step in range(int(steps.max(initial=0)) + 1):
        if step in want:
            r = a @ w - t
            out[want[step]] = r @ r
        w = w - eta * (a.T @ (a @ w - t))
    return out


def learning_curves(phi_train, y_train, phi_test, y_test, *, eta: float, steps) -> dict:
    """Train and test mean squared error and ‖w_t‖ of GD after each number of steps.

    Parameters
    ----------
    phi_train, phi_test : arrays n × d and m × d (already prepared)
    y_train, y_test : arrays (n,), (m,)
    eta : step size of w ← w − η Φᵀ(Φw − y) (the summed squared error, as Prop. 1)
    steps : sequence of int ≥ 0

    Returns
    -------
    dict of np.ndarray (len(steps),): ``train_mse`` = ‖Φ w_t − y‖²/n,
    ``test_mse`` (the same on the test set) and ``weight_norm`` = ‖w_t‖.
    """
    a, t = _check(phi_train, y_train, eta)
    b = np.asarray(phi_test, dtype=np.float64)
    t_test = np.asarray(y_test, dtype=np.float64).reshape(-1)
    if b.ndim != 2 or b.shape[1] != a.shape[1] or b.shape[0] != t_test.shape[0]:
        raise ValueError(
            f"phi_test ({b.shape}) must have the train width {a.shape[1]} and one row per y_test entry"
        )
    u, s, vt = _svd(a)
    uty = u.T @ t
    coef = (1.0 - _decay(s, eta, steps)) * (uty / s)[None, :]  # w_t in the V basis: T × r
    weights = coef @ vt  # T × d
    with np.errstate(over="ignore", invalid="ignore"):
        train = ((weights @ a.T - t[None, :]) ** 2).mean(axis=1)
        test = ((weights @ b.T - t_test[None, :]) ** 2).mean(axis=1)
    return {"train_mse": train, "test_mse": test, "weight_norm": np.linalg.norm(coef, axis=1)}


def log_steps(*, max_steps: int, num: int) -> np.ndarray:
    """0 and about ``num`` log-spaced distinct integers in [1, max_steps]."""
    if max_steps < 1 or num < 2:
        raise ValueError(f"need max_steps >= 1 and num >= 2, got {max_steps}, {num}")
    return np.unique(np.concatenate([[0], np.round(np.geomspace(1, max_steps, num)).astype(np.int64)]))


def _check(phi, y, eta):
    a = np.asarray(phi, dtype=np.float64)
    t = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.ndim != 2 or t.shape[0] != a.shape[0]:
        raise ValueError(f"phi must be n x d with one y per row, got phi {a.shape} and y {t.shape}")
    if not eta > 0:
        raise ValueError(f"eta (step size) must be > 0, got {eta}")
    return a, t
