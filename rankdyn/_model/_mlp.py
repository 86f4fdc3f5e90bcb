r"""The MLP block of a transformer layer and its activations (docs/theory.md#trained-checkpoints).

$\mathrm{MLP}(x) = \sigma(x W_1 + b_1) W_2 + b_2$ with $\sigma$ named by ``activation``:

- ``"gelu_tanh"`` (default, the form rankdyn's random models always used, ``jax.nn.gelu``):
  $\tfrac12 x (1 + \tanh(\sqrt{2/\pi}(x + 0.044715 x^3)))$, HF's ``gelu_new`` / ``gelu_pytorch_tanh``;
- ``"gelu"``: the exact $x \Phi(x) = \tfrac12 x (1 + \mathrm{erf}(x/\sqrt 2))$, HF's and PyTorch's ``gelu``
  (BERT, MiniLM);
- ``"relu"``;
- ``"silu"``: $x\,\sigma(x)$ (Llama's SwiGLU gate, HF's ``silu``).

`GatedMLPWeights` is the SwiGLU block of Llama-family decoders,
$\mathrm{MLP}(x) = (\mathrm{silu}(x W_1) \odot x W_3) W_2$ (gate $W_1$, up $W_3$, down $W_2$; no biases).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import UsageError

__all__ = ["MLPWeights", "GatedMLPWeights", "ACTIVATIONS"]

#: Activation name -> function. The two GELUs differ by up to ~1e-3 at |x| ~ 2: a checkpoint
#: run with the wrong one drifts visibly, so the name is part of the weights, not a guess.
ACTIVATIONS = {
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


class MLPWeights(eqx.Module):
    r"""Weights of a two-layer MLP $x \mapsto \sigma(x W_1 + b_1) W_2 + b_2$ (optional leading layer axis).

    Arguments:
        w1, b1, w2, b2: ``(*layers, d, f)``, ``(*layers, f)``, ``(*layers, f, d)``, ``(*layers, d)``.
        activation: a name of `ACTIVATIONS` (static); default ``"gelu_tanh"``.

    Raises:
        ValueError: for an unknown activation name.
    """

    w1: Float[Array, "*layers d f"]
    b1: Float[Array, "*layers f"]
    w2: Float[Array, "*layers f d"]
    b2: Float[Array, "*layers d"]
    activation: str = eqx.field(static=True, default="gelu_tanh")

    def __check_init__(self):
        if self.activation not in ACTIVATIONS:
            raise UsageError(
                f"MLPWeights(activation={self.activation!r}): expected one of {', '.join(ACTIVATIONS)}."
            )

    def __call__(self, x, precision):
        h = ACTIVATIONS[self.activation](jnp.matmul(x, self.w1, precision=precision) + self.b1[None, :])
        return jnp.matmul(h, self.w2, precision=precision) + self.b2[None, :]


class GatedMLPWeights(eqx.Module):
    r"""Weights of a gated MLP $x \mapsto (\sigma(x W_1) \odot x W_3) W_2$ (SwiGLU for ``"silu"``).

    Arguments:
        w1, w3, w2: gate ``(*layers, d, f)``, up ``(*layers, d, f)``, down ``(*layers, f, d)``
            (Meta's names; HF's ``gate_proj``, ``up_proj``, ``down_proj`` transposed).
        activation: a name of `ACTIVATIONS` (static); default ``"silu"``.

    Raises:
        ValueError: for an unknown activation name.
    """

    w1: Float[Array, "*layers d f"]
    w3: Float[Array, "*layers d f"]
    w2: Float[Array, "*layers f d"]
    activation: str = eqx.field(static=True, default="silu")

    def __check_init__(self):
        if self.activation not in ACTIVATIONS:
            raise UsageError(
                f"GatedMLPWeights(activation={self.activation!r}): expected one of {', '.join(ACTIVATIONS)}."
            )

    def __call__(self, x, precision):
        gate = ACTIVATIONS[self.activation](jnp.matmul(x, self.w1, precision=precision))
        return jnp.matmul(gate * jnp.matmul(x, self.w3, precision=precision), self.w2, precision=precision)
