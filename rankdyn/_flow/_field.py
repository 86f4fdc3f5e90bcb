r"""The self-attention flow on the sphere: its vector field and its interaction energy.

For tokens $x_1, \dots, x_n \in S^{d-1}$ (the rows of ``x``), a mask graph with neighbours
$N(i)$ and matrices $Q, K, V$ (docs/theory.md#continuous-time):

$$\text{SA:}\quad \dot x_i = P_{x_i}\Big(\frac{\sum_{j \in N(i)} e^{\beta \langle Q x_i, K x_j\rangle} V x_j}
{\sum_{j \in N(i)} e^{\beta \langle Q x_i, K x_j\rangle}}\Big),\qquad
\text{USA:}\quad \dot x_i = P_{x_i}\Big(\frac1n \sum_{j \in N(i)} e^{\beta \langle Q x_i, K x_j\rangle}
 V x_j\Big),$$

with $P_x y = y - \langle x, y\rangle x / |x|^2$ (the tangent projection; on the sphere it is the
usual $y - \langle x, y\rangle x$, and off it the exact flow still keeps every $|x_i|$ constant, so
the drift an integrator reports is its own error). USA divides by $n$ for every mask, not by
$|N(i)|$. For $Q = K = V = I$ the interaction energy is

$$E_\beta(X) = \frac{1}{2\beta n^2} \sum_{i,j=1}^n e^{\beta \langle x_i, x_j\rangle}.$$

``placement`` other than ``"post"`` (the flow above) regulates each token's speed as a
normalisation scheme does (rankdyn/_flow/_schemes.py, arXiv 2510.22026 eq. (NA) and Table 2).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from .._model._masks import mask_from_adjacency
from ._schemes import RADIAL_PLACEMENTS, check_scheme_arguments, scheme_velocity

__all__ = ["FlowField", "DYNAMICS", "interaction_energy", "tangent_project"]

#: The two flows: normalised self-attention and unnormalised self-attention.
DYNAMICS = ("sa", "usa")
_HI = lax.Precision.HIGHEST


def tangent_project(x: Float[Array, "n d"], y: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""$P_{x_i} y_i = y_i - \langle x_i, y_i\rangle x_i / |x_i|^2$ row by row (zero rows pass ``y``)."""
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    return y - jnp.sum(x * y, axis=-1, keepdims=True) / jnp.where(sq > 0, sq, 1.0) * x


def _matrix(name: str, value, d: int) -> np.ndarray | Array:
    """``value`` as a finite ``(d, d)`` matrix; None is the identity."""
    if value is None:
        return np.eye(d)
    arr = np.asarray(value, dtype=float)
    if arr.shape != (d, d):
        raise UsageError(
            f"{name} must be a square (d, d) = ({d}, {d}) matrix acting on the tokens, got shape "
            f"{arr.shape}; "
            "pass a d x d matrix (or None for the identity)."
        )
    if not np.all(np.isfinite(arr)):
        raise UsageError(f"{name} has non-finite entries (NaN or inf); pass a finite (d, d) matrix.")
    return arr


class FlowField(eqx.Module):
    r"""The vector field of the SA or USA flow on $(S^{d-1})^n$ for one mask and $Q, K, V$.

    ``field(x, beta)`` is tangent to the sphere at every row of ``x`` (module docstring).
    The inverse temperature is an argument, not a field, so one compiled program serves every $\beta$
    (and ``jax.vmap`` over it gives the phase diagram).

    Arguments:
        mask: boolean ``(n, n)`` mask (``M[i, j]``: token i attends to token j), diagonal True.
        d: the token dimension.
        dynamics: ``"sa"`` (softmax-normalised) or ``"usa"`` (divided by $n$).
        q, k, v: ``(d, d)`` matrices; None (the default) is the identity.
        placement: the normalisation scheme, one of `rankdyn._flow._schemes.FLOW_PLACEMENTS`:
            ``"post"`` (the flow on the sphere above, the default), ``"pre"``, ``"mix"``,
            ``"peri"``, ``"ngpt"`` or ``"lns"``, each with its speed-regulation factor (arXiv
            2510.22026, Table 2). ``pre``, ``mix`` and ``peri`` move the radius too.
        ngpt_alpha: nGPT's rate $\alpha > 0$ (its $\alpha_t$ held constant); ``ngpt`` only.
        mix_time: the time $\tau \ge 0$ at which ``mix`` turns from post- to pre-LN.

    Raises:
        UsageError: on an unknown ``dynamics`` or ``placement``, ``d < 2``, a bad mask, a
            non-square or non-finite ``q``, ``k`` or ``v``, or a scheme parameter missing, out of
            range or given to another scheme (the message names the argument).
    """

    mask: Array
    q: Float[Array, "d d"]
    k: Float[Array, "d d"]
    v: Float[Array, "d d"]
    ngpt_alpha: Float[Array, ""]
    mix_time: Float[Array, ""]
    dynamics: str = eqx.field(static=True)
    identity: bool = eqx.field(static=True)
    placement: str = eqx.field(static=True)

    def __init__(
        self,
        mask: ArrayLike,
        d: int,
        dynamics: str = "sa",
        q=None,
        k=None,
        v=None,
        *,
        placement: str = "post",
        ngpt_alpha: float | None = None,
        mix_time: float | None = None,
    ):
        if dynamics not in DYNAMICS:
            raise UsageError(f"dynamics must be one of {DYNAMICS}, got {dynamics!r}.")
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
            raise UsageError(
                f"the token dimension d must be an integer >= 2 (the sphere S^(d-1)), got {d!r}."
            )
        # An explicit dtype (the one asarray would choose): JAX then converts on the host, where
        # without one it compiles a small program per shape to bring a NumPy array in.
        self.mask = jnp.asarray(mask_from_adjacency(mask), bool)
        mats = {name: _matrix(name, val, int(d)) for name, val in (("q", q), ("k", k), ("v", v))}
        self.identity = all(val is None or np.array_equal(np.asarray(val), np.eye(d)) for val in (q, k, v))
        real = jax.dtypes.canonicalize_dtype(np.float64)
        self.q, self.k, self.v = (jnp.asarray(mats[name], real) for name in ("q", "k", "v"))
        self.dynamics = dynamics
        self.placement, alpha, tau = check_scheme_arguments(placement, ngpt_alpha, mix_time)
        self.ngpt_alpha, self.mix_time = jnp.asarray(alpha), jnp.asarray(tau)

    @property
    def radial(self) -> bool:
        """Whether the radius moves (``pre``, ``mix``, ``peri``): the state is then not projected."""
        return self.placement in RADIAL_PLACEMENTS

    @property
    def num_tokens(self) -> int:
        return self.mask.shape[0]

    @property
    def dim(self) -> int:
        return self.q.shape[0]

    def weights(self, x: Float[Array, "n d"], beta) -> Float[Array, "n n"]:
        r"""The interaction weights: masked softmax of $\beta\langle Q x_i, K x_j\rangle$ (SA) or
        $e^{\beta\langle Q x_i, K x_j\rangle} / n$ on the mask (USA)."""
        dt = x.dtype
        q, k = self.q.astype(dt), self.k.astype(dt)
        scores = jnp.asarray(beta, dt) * jnp.matmul(
            jnp.matmul(x, q.T, precision=_HI), jnp.matmul(x, k.T, precision=_HI).T, precision=_HI
        )
        if self.dynamics == "sa":
            # A finite minimum, not -inf: a row always has its self-loop, so it never becomes 0/0.
            s = jnp.where(self.mask, scores, jnp.finfo(dt).min)
            w = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
            w = jnp.where(self.mask, w, 0)
            return w / jnp.sum(w, axis=-1, keepdims=True)
        return jnp.where(self.mask, jnp.exp(scores), 0) / self.num_tokens

    def attention(self, theta: Float[Array, "n d"], beta) -> Float[Array, "n d"]:
        r"""The attention vectors $A_j(\Theta) = \sum_k w_{jk} V\theta_k$ (not projected)."""
        vx = jnp.matmul(theta, self.v.astype(theta.dtype).T, precision=_HI)
        return jnp.matmul(self.weights(theta, beta), vx, precision=_HI)

    def __call__(self, x: Float[Array, "n d"], beta, t=0.0) -> Float[Array, "n d"]:
        """The velocity of every token at time ``t`` (tangent to the sphere at it for ``post``,
        ``ngpt`` and ``lns``; only ``mix`` and ``lns`` read ``t``)."""
        if self.placement == "post":
            return tangent_project(x, self.attention(x, beta))
        alpha, tau = self.ngpt_alpha.astype(x.dtype), self.mix_time.astype(x.dtype)
        return scheme_velocity(self.placement, x, lambda th: self.attention(th, beta), t, alpha, tau)


def interaction_energy(x: Float[ArrayLike, "n d"], beta) -> Float[Array, ""]:
    r"""$E_\beta(X) = \frac{1}{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}$ (for $Q = K = V = I$).

    At $\beta = 0$ the formula is $1/(2\beta)$ plus a term that vanishes; there the function
    returns the limit of $E_\beta - 1/(2\beta)$, i.e. $\frac{1}{2n^2}\sum_{i,j}\langle x_i, x_j\rangle$,
    which orders configurations the same way as $E_\beta$ for small $\beta$. The energy is
    computed in log space, $\log E_\beta = \beta + \log\sum_{ij} e^{\beta(\langle x_i, x_j\rangle - 1)}
    - \log(2\beta n^2)$, then exponentiated: no intermediate overflows (a direct $e^\beta$ factor
    overflows float32 above $\beta \approx 88.7$ although $E_\beta$ itself is representable);
    the result is inf only where $E_\beta$ itself exceeds the dtype's range.

    Arguments:
        x: ``(n, d)`` tokens on the sphere.
        beta: the inverse temperature, >= 0.

    Returns:
        The energy (a scalar).
    """
    x = jnp.asarray(x)
    n = x.shape[0]
    beta = jnp.asarray(beta, x.dtype)
    g = jnp.matmul(x, x.T, precision=_HI)
    safe = jnp.where(beta > 0, beta, 1.0)
    log_e = safe + jax.nn.logsumexp(safe * (g - 1)) - jnp.log(2 * safe * n**2)
    e = jnp.exp(log_e)
    return jnp.where(beta > 0, e, jnp.sum(g) / (2 * n**2))
