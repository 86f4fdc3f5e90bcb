r"""Lyapunov spectra of the layer map, of any JAX map and of the flow (QR / Benettin method).

Which space each kind of layer uses (docs/theory.md#lyapunov-spectra):

- post-LN onto a sphere (`rankdyn.SphereNorm`, the paper's eq. 3): the tangent space of the
  product of spheres $(\mathbb S^{d-1})^n$, dimension $n(d-1)$ (the $n$ radial directions,
  contracted to zero by LN, are projected out after every layer);
- pre-LN, no LN, RMS or affine LayerNorm, trained BERT, GPT-2, MPNet or Llama-family stacks: the full space
  $\mathbb R^{nd}$;
- the flow (`lyapunov_spectrum_flow`): the tangent space of the spheres, per unit time;
- a generic map (`lyapunov_spectrum_map`): $\mathbb R^m$.

Covariant Lyapunov vectors (Ginelli's algorithm: `covariant_vectors`, `covariant_vectors_map`)
live in the same spaces.

Exponents are natural logs per layer (per step; per unit time for the flow), in descending
order. For per-layer (or cycled) weights they are those of the product of the layers' Jacobians.
"""

from ._lyapunov._clv_result import CovariantVectors as CovariantVectors
from ._lyapunov._covariant import (
    covariant_vectors as covariant_vectors,
    covariant_vectors_map as covariant_vectors_map,
)
from ._lyapunov._flow import lyapunov_spectrum_flow as lyapunov_spectrum_flow
from ._lyapunov._layer import (
    lyapunov_spectrum as lyapunov_spectrum,
    spectrum_dim as spectrum_dim,
    uses_tangent_space as uses_tangent_space,
)
from ._lyapunov._qr import lyapunov_spectrum_map as lyapunov_spectrum_map
from ._lyapunov._result import (
    FLAG_NONFINITE as FLAG_NONFINITE,
    FLAG_UNDERFLOW as FLAG_UNDERFLOW,
    NEUTRAL_TOL as NEUTRAL_TOL,
    LyapunovResult as LyapunovResult,
    exponent_roles as exponent_roles,
    flag_names as flag_names,
)
