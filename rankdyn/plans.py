"""Plans: a run's options checked and its sizes resolved once, before anything is computed.

A plan is a frozen, JAX-free object built from the run's options (and, for `SimulatePlan`, the
layer or its `rankdyn.layer.ModelConfig`). Its checks run when it is built and raise
`rankdyn.UsageError`, naming the command line's flags (``flags=True``) or the Python arguments. The
command line builds the plan and refuses from it before JAX loads; the library builds the same plan
(or accepts one, ``rankdyn.simulate(..., plan=)``), so every check and the memory estimate live in
one place and cannot disagree.

- `SimulatePlan`: a depth-scan run (``rankdyn.simulate``, ``rankdyn simulate``, a sweep's chunk):
  depth and ``save_every`` (``num_layers`` a multiple of it), ``rank_tol``, the chunk, the metrics
  kept, the attention path the layer takes (dense or blocked) with its block size, and
  ``memory()``, the run's peak-memory estimate.
- `LyapunovPlan`: a QR run of the Lyapunov spectra: ``k`` against the state's dimension,
  ``discard``, ``qr_every``, the chunk, and its memory estimate.
- `ContinuationPlan`: a continuation's interval and steps (``ds``, ``ds_min``, ``ds_max`` against
  what float64 resolves over the interval, ``max_steps``).
- `FlowPlan`: a flow run's sizes (``rankdyn.flow.solve_flow``, ``rankdyn flow``; deterministic or
  noisy): the chunk, the pieces of saved times, the noisy drift's row blocks, and ``memory()``, with
  ``check_memory()``, the refusal naming the flags or arguments to lower.
"""

from ._equilibria._steps import ContinuationPlan as ContinuationPlan
from ._flow._plan import FlowPlan as FlowPlan
from ._lyapunov._plan import LyapunovPlan as LyapunovPlan
from ._run._plan import SimulatePlan as SimulatePlan
