"""Caruana's peaks functions, the synthetic transfer task of Imani, Hu & White, section 7.1.

Six variables A..F are drawn uniformly from [0, 1). A peaks function on three of
them is

    P_{X,Y,Z}(a) = Y if X > 0.5 else Z

(its value is the value of the chosen variable). Each variable is encoded by 10
Gaussian RBF features centred at 0.0, 0.1, ..., 0.9, with height 0.5 and standard
deviation 0.1::

    rbf_c(v) = 0.5 * exp(-(v - c)^2 / (2 * 0.1^2))

so an input has 60 features; each input vector is scaled to unit length and the
labels are shifted to mean zero. The source task S uses three random variables,
T1 the same three in another order (a related task) and T2 the other three (an
unrelated task).

    >>> rng = np.random.default_rng(0)
    >>> tasks = choose_tasks(rng=rng)        # {"S": (0, 4, 2), "T1": (2, 0, 4), "T2": (1, 3, 5)}
    >>> x, labels = sample_peaks(n=100, tasks=tasks, rng=rng)
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "NUM_VARIABLES",
    "RBF_CENTRES",
    "rbf_encode",
    "peaks_function",
    "choose_tasks",
    "sample_peaks",
]

NUM_VARIABLES = 6
RBF_CENTRES = np.arange(10) / 10.0  # 0.0, 0.1, ..., 0.9
RBF_HEIGHT = 0.5
RBF_STD = 0.1
TASK_NAMES = ("S", "T1", "T2")


def rbf_encode(values, *, centres=RBF_CENTRES, height: float = RBF_HEIGHT, std: float = RBF_STD,
               normalize: bool = True) -> np.ndarray:
    """Encode each variable by Gaussian RBF features (section 7.1).

    Parameters
    ----------
    values : array n × m
        Variable values (the paper: m = 6 variables on [0, 1)).
    centres, height, std
        RBF centres (default 0.0 ... 0.9), height 0.5 and standard deviation 0.1.
    normalize : bool
        Scale every encoded row to unit L2 norm (the paper's "inputs are normalized
        to a length of one").

    Returns
    -------
    np.ndarray, n × (m · len(centres)), float64
        Feature ``j * len(centres) + k`` is ``height * exp(-(v_j - c_k)^2 / (2 std^2))``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"values must be n x m (one column per variable), got shape {v.shape}")
    if std <= 0:
        raise ValueError(f"std must be > 0, got {std}")
    c = np.asarray(centres, dtype=np.float64).reshape(1, 1, -1)
    feats = height * np.exp(-((v[:, :, None] - c) ** 2) / (2.0 * std**2))
    feats = feats.reshape(v.shape[0], -1)
    if normalize:
        feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    return feats


def peaks_function(values, *, variables) -> np.ndarray:
    """P_{X,Y,Z}: the value of variable Y where variable X > 0.5, else the value of Z.

    Parameters
    ----------
    values : array n × m
        Variable values.
    variables : tuple of 3 distinct column indices (X, Y, Z)

    Returns
    -------
    np.ndarray, shape (n,)
    """
    v = np.asarray(values, dtype=np.float64)
    if len(variables) != 3 or len(set(variables)) != 3:
        raise ValueError(f"variables must be 3 distinct column indices (X, Y, Z), got {variables}")
    if v.ndim != 2 or max(variables) >= v.shape[1] or min(variables) < 0:
        raise ValueError(f"variables {variables} must index the columns of values (shape {v.shape})")
    x, y, z = variables
    return np.where(v[:, x] > 0.5, v[:, y], v[:, z])


def choose_tasks(*, rng: np.random.Generator) -> dict[str, tuple[int, int, int]]:
    """Draw the source task S and its related (T1) and unrelated (T2) targets.

    S takes three random variables in random order; T1 is a different order of the
    same three; T2 is a random order of the other three.

    Returns
    -------
    dict ``{"S": (x, y, z), "T1": (...), "T2": (...)}`` of variable indices.
    """
    order = rng.permutation(NUM_VARIABLES)
    source, other = tuple(int(i) for i in order[:3]), order[3:]
    while True:  # another order of the same variables: any permutation but the identity
        t1 = tuple(int(i) for i in rng.permutation(source))
        if t1 != source:
            break
    return {"S": source, "T1": t1, "T2": tuple(int(i) for i in rng.permutation(other))}


def sample_peaks(*, n: int, tasks: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """Sample ``n`` inputs (60 unit-length RBF features) and each task's labels.

    Labels are returned raw (in [0, 1)); callers centre them with the mean of the
    set the model is fit on ("labels normalized to have a mean of zero").

    Returns
    -------
    x : np.ndarray n × 60, float64
    labels : dict task name -> np.ndarray (n,)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    values = rng.random((n, NUM_VARIABLES))
    labels = {name: peaks_function(values, variables=v) for name, v in tasks.items()}
    return rbf_encode(values), labels
