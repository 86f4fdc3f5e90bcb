r"""Equilibria and saddles of the flow: zeros of the projected field, classified on the tangent space.

An equilibrium is a configuration $X^*$ on $(S^{d-1})^n$ with $F_\beta(X^*) = 0$. It is found by
a Levenberg-Marquardt least-squares solve (Optimistix) of $F_\beta(X / |X|) = 0$ from a start,
vmapped over starts with per-member result codes (the zeros come in rotation orbits, so the
Jacobian is singular there and a least-squares method is the right tool).

Classification. Let $B$ be an orthonormal basis of the tangent space
$T = \bigoplus_i x_i^\perp$ (dimension $n(d-1)$) and $J = B^\top DF_\beta(X^*) B$; at a zero,
$DF_\beta$ maps $T$ into itself. For $Q = K = V = I$ the field is equivariant under rotations
$X \mapsto X R$, so the tangent vectors $X\Omega$ ($\Omega$ skew) of the orbit are in the kernel
of $J$: $d - 1$ of them for a single cluster, never more than $d(d-1)/2$. They are removed by
restricting to the orthogonal complement $C$ of their span ($C^\top J C$ is the map induced on
$T / \text{orbit}$). With $\lambda$ its eigenvalues and a tolerance $\tau$:

- ``stable``: every $\operatorname{Re}\lambda < -\tau$;
- ``saddle``: $k \ge 1$ eigenvalues with $\operatorname{Re}\lambda > \tau$ and at least one
  with $\operatorname{Re}\lambda < -\tau$ (index $k$); ``unstable``: all of them $> \tau$;
- ``marginal``: none $> \tau$ but some $|\operatorname{Re}\lambda| \le \tau$.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from .._model._sphere import tangent_basis
from ._field import FlowField

__all__ = [
    "find_zeros",
    "classify_equilibrium",
    "field_jacobian",
    "rotation_invariant",
    "Classification",
]


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _check_post(field: FlowField, what: str) -> None:
    """Refuse a scheme other than post-LN: its zeros are not equilibria on the sphere."""
    if field.placement != "post":
        raise UsageError(
            f"{what} takes the post-LN flow on the sphere only, not placement={field.placement!r}: the other "
            "schemes divide the same tangent field by a positive speed factor (the same zeros), and pre, "
            "mix and peri also move the radius, which never stops; use a FlowField with placement='post'."
        )


def field_jacobian(field: FlowField, x: Float[ArrayLike, "n d"], beta) -> tuple[Array, Array]:
    """``(J, B)``: the field's Jacobian on the tangent space in the basis ``B`` (``(nd, n(d-1))``).

    Not `rankdyn._equilibria.tangent_jacobian` (a layer map's Jacobian, one matrix): this one is
    the vector field's, with its basis.
    ``B`` is `rankdyn._equilibria.tangent_basis` ``(x)`` (the one basis of `rankdyn._model._sphere`:
    per token a Householder reflection), of the tokens' directions when ``x`` is off the spheres.
    """
    _check_post(field, "field_jacobian")
    x = jnp.asarray(x)
    n, d = x.shape
    jac = jax.jacfwd(lambda y: field(y.reshape(n, d), beta).reshape(-1))(x.reshape(-1))
    b = tangent_basis(x)
    return b.T @ jac @ b, b


def _orbit_basis(x, b, tol=1e-8):
    """Orthonormal basis (in tangent coordinates) of the span of the rotation directions $X\\Omega$."""
    d = x.shape[1]
    gens = []
    for a in range(d):
        for c in range(a + 1, d):
            om = jnp.zeros((d, d), x.dtype).at[a, c].set(1.0).at[c, a].set(-1.0)
            gens.append(b.T @ (x @ om).reshape(-1))
    g = jnp.stack(gens, axis=1)
    u, s, _ = jnp.linalg.svd(g, full_matrices=False)
    return u[:, np.asarray(s > tol * max(float(s[0]), 1.0))]


class Classification(eqx.Module):
    """The linear stability of one equilibrium of the flow.

    Attributes:
        kind: ``"stable"``, ``"saddle"``, ``"unstable"`` or ``"marginal"``.
        index: number of eigenvalues with real part > ``tol`` (unstable directions).
        orbit_dim: rotation directions removed (0 unless $Q = K = V = I$).
        eigenvalues: the eigenvalues after the removal, sorted by decreasing real part.
        tol: the tolerance used.
    """

    kind: str = eqx.field(static=True)
    index: int = eqx.field(static=True)
    orbit_dim: int = eqx.field(static=True)
    eigenvalues: Array
    tol: float = eqx.field(static=True)

    def to_dict(self) -> dict:
        ev = np.asarray(self.eigenvalues)
        return {
            "kind": self.kind,
            "index": self.index,
            "orbit_dim": self.orbit_dim,
            "max_real": float(ev.real.max()) if ev.size else None,
            "eigenvalues_real": ev.real.tolist(),
            "tol": self.tol,
        }


def classify_equilibrium(
    field: FlowField, x: Float[ArrayLike, "n d"], beta, *, tol: float = 1e-8
) -> Classification:
    r"""Classify an equilibrium by the real parts of the tangent-space Jacobian's eigenvalues.

    The rotation orbit directions are removed first when the field is rotation-equivariant
    ($Q = K = V = I$); see the module docstring for the rule.

    Arguments:
        field: the `FlowField`.
        x: ``(n, d)`` the equilibrium (rows are normalised).
        beta: the inverse temperature.
        tol: $\tau$; set it above the accuracy of the zero (about its residual).

    Returns:
        A `Classification`.
    """
    x = _unit(jnp.asarray(x))
    j, b = field_jacobian(field, x, beta)
    orbit_dim = 0
    if field.identity:
        o = _orbit_basis(x, b)
        orbit_dim = int(o.shape[1])
        # Orthonormal complement of the orbit span: the last columns of a full SVD basis.
        full, _, _ = jnp.linalg.svd(o, full_matrices=True)
        c = full[:, orbit_dim:]
        j = c.T @ j @ c
    ev = np.linalg.eigvals(np.asarray(j))
    ev = ev[np.argsort(-ev.real)]
    index = int(np.sum(ev.real > tol))
    neg = int(np.sum(ev.real < -tol))
    if index == 0:
        kind = "stable" if neg == ev.size else "marginal"
    else:
        kind = "unstable" if index == ev.size else "saddle"
    return Classification(kind=kind, index=index, orbit_dim=orbit_dim, eigenvalues=jnp.asarray(ev), tol=tol)


def rotation_invariant(x: Float[ArrayLike, "n d"]) -> np.ndarray:
    """The sorted pairwise cosines: equal for configurations that differ by a rotation and a
    relabelling of the tokens (used to compare equilibria modulo rotation)."""
    u = np.asarray(_unit(jnp.asarray(x)))
    return np.sort((u @ u.T).ravel())


def find_zeros(field: FlowField, x0, beta, *, max_steps: int = 200, rtol: float = 1e-10, atol: float = 1e-12):
    r"""Zeros of $F_\beta$ near each start: Levenberg-Marquardt on $F_\beta(X/|X|)$, vmapped.

    The flow's equilibria, as plain arrays: not `rankdyn._equilibria.find_equilibria` (fixed
    points of a layer map, an `EquilibriumSolution`).

    Arguments:
        field: the `FlowField`.
        x0: ``(k, n, d)`` starting configurations (e.g. states at a metastable plateau); the
            name of the starts in `solve_flow` and `rankdyn.simulate`.
        beta: the inverse temperature.
        max_steps: Levenberg-Marquardt steps per start.
        rtol, atol: its tolerances.

    Returns:
        ``(x, residual, ok)``: the solutions on the sphere ``(k, n, d)``, $\max |F_\beta(x)|$ per
        start, and whether the solver reported success (``throw=False``: no failure kills the batch).
    """
    _check_post(field, "find_zeros")
    starts = jnp.asarray(x0)
    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)

    def one(x0):
        sol = optx.least_squares(
            lambda y, b: field(_unit(y), b), solver, x0, args=beta, max_steps=max_steps, throw=False
        )
        x = _unit(sol.value)
        return x, jnp.max(jnp.abs(field(x, beta))), sol.result == optx.RESULTS.successful

    return jax.jit(jax.vmap(one))(starts)
