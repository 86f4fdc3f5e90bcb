"""The mean-field solvers' argument checks: every refusal is a `UsageError` raised before any compute.

Each check names the argument, what it got and the fix: a negative or non-finite ``sigma``, a
dimension other than the circle's $d = 2$, a resolution below what the kernel $e^{\\beta\\langle x,
y\\rangle}$ needs (the message gives the needed one), an initial density that is negative, not
normalisable or of the wrong shape.
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import UsageError
from ._circle import KERNEL_EPS, kernel_modes

__all__ = [
    "DYNAMICS",
    "check_beta",
    "check_sigma",
    "check_dimension",
    "check_modes",
    "check_density",
    "check_times",
    "check_dynamics",
    "check_positive",
]

#: The two mean-field dynamics: softmax-normalised and unnormalised self-attention.
DYNAMICS = ("sa", "usa")
#: Above this |beta| the kernel e^{beta cos} overflows float64 (e^709.8 is the largest double).
_BETA_MAX = 700.0


def _real(name: str, value) -> float:
    if isinstance(value, bool) or np.ndim(value) != 0:
        raise UsageError(f"{name} must be one real number, got {value!r}.")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be one real number, got {value!r}.") from None
    if not math.isfinite(out):
        raise UsageError(f"{name} must be finite, got {out}; pass a finite real number.")
    return out


def check_positive(name: str, value) -> float:
    """A finite number > 0 (a tolerance, a step)."""
    out = _real(name, value)
    if out <= 0:
        raise UsageError(f"{name} must be > 0, got {out}.")
    return out


def check_dynamics(dynamics: str) -> str:
    if dynamics not in DYNAMICS:
        raise UsageError(f"dynamics must be one of {DYNAMICS}, got {dynamics!r}.")
    return dynamics


def check_beta(beta) -> float:
    """A finite inverse temperature with $|\\beta| \\le 700$ (the kernel stays a finite double)."""
    out = _real("beta", beta)
    if abs(out) > _BETA_MAX:
        raise UsageError(f"|beta| must be at most {_BETA_MAX:g} (e^beta overflows float64), got {out}.")
    return out


def check_sigma(sigma) -> float:
    """A finite noise level $\\sigma \\ge 0$."""
    out = _real("sigma", sigma)
    if out < 0:
        raise UsageError(f"sigma (the noise level) must be >= 0, got {out}; pass sigma >= 0 (0: no noise).")
    return out


def check_dimension(d) -> int:
    """The circle solver's dimension: $d = 2$ ($S^1$) only."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d != 2:
        raise UsageError(
            f"the circle solver needs d = 2 (tokens on S^1), got d = {d!r}; "
            "the density solver on S^(d-1) for d >= 3 is not available."
        )
    return 2


def check_modes(num_modes, beta: float) -> int:
    """``num_modes`` an integer at least what the kernel needs (`kernel_modes`)."""
    if isinstance(num_modes, bool) or not isinstance(num_modes, (int, np.integer)) or num_modes < 1:
        raise UsageError(f"num_modes must be an integer >= 1, got {num_modes!r}.")
    need = kernel_modes(beta)
    if num_modes < need:
        raise UsageError(
            f"num_modes = {num_modes} is too low for the kernel e^(beta cos) at beta = {beta:g}: its "
            f"relative Fourier coefficient I_K(beta)/I_0(beta) is above {KERNEL_EPS:g} at the top mode; "
            f"pass num_modes >= {need}."
        )
    return int(num_modes)


def check_density(rho, num_modes: int, name: str = "rho0") -> tuple[np.ndarray, bool]:
    r"""Grid values ``(N,)`` or ``(batch, N)`` of densities at $\theta_j = 2\pi j/N$, $N > 2K$:
    non-negative, finite, with positive mass. Returns them normalised to mass 1 (as ``(batch, N)``)
    and whether a batch axis was given."""
    arr = np.asarray(rho)
    if arr.dtype.kind not in "fiu" or arr.ndim not in (1, 2) or arr.shape[-1] < 2 * num_modes + 1:
        raise UsageError(
            f"{name} must be real grid values of shape (N,) or (batch, N) at theta_j = 2 pi j / N with "
            f"N >= 2 num_modes + 1 = {2 * num_modes + 1}, got shape {arr.shape} ({arr.dtype}); "
            "sample the density on a finer grid."
        )
    arr = arr.astype(np.float64)
    batched = arr.ndim == 2
    arr = arr.reshape(-1, arr.shape[-1])
    if not np.all(np.isfinite(arr)):
        raise UsageError(f"{name} has non-finite values (NaN or inf): it is not normalisable.")
    if np.any(arr < 0):
        raise UsageError(f"{name} is negative somewhere (min {arr.min():.3g}): a density is >= 0.")
    mass = arr.mean(axis=-1) * 2 * math.pi
    if np.any(mass <= 0):
        raise UsageError(f"{name} has zero mass (it vanishes everywhere): it is not normalisable.")
    return arr / mass[:, None], batched


def check_times(t1, times) -> np.ndarray:
    """The saved times: increasing, finite, in $[0, t_1]$, ending at $t_1 > 0$."""
    end = _real("t1", t1)
    if end <= 0:
        raise UsageError(f"t1 must be > 0, got {end}.")
    ts = np.asarray([end] if times is None else times, dtype=np.float64).reshape(-1)
    if ts.size == 0 or not np.all(np.isfinite(ts)) or np.any(np.diff(ts) <= 0):
        raise UsageError("times must be a non-empty, increasing sequence of finite numbers.")
    if ts[0] < 0 or ts[-1] > end:
        raise UsageError(f"times must lie in [0, t1] = [0, {end}], got [{ts[0]}, {ts[-1]}].")
    return ts
