"""rankdyn: token dynamics of masked self-attention with LayerNorm, in JAX.

Implements and extends Wu, Ajorlou, Wang, Jegelka, Jadbabaie, "On the Role of Attention Masks
and LayerNorm in Transformers" (NeurIPS 2024). This module is the table of contents: the names
most scripts need are here; the rest lives in the sub-namespaces

- `rankdyn.masks`: mask constructors and graph quantities (centres, radius, connectivity);
- `rankdyn.metrics`: every collapse metric and the metric names;
- `rankdyn.weights`: value / query-key families and initial-token families;
- `rankdyn.theory`: closed-form constructions, rates and bounds, basins, counterexample search;
- `rankdyn.checkpoints`: trained BERT, GPT-2, MPNet and Llama-family (SmolLM2, also GGUF)
  checkpoints as layer stacks, text as tokens;
- `rankdyn.equilibria`: the equilibrium solvers, census, symmetry and stability;
- `rankdyn.lyapunov`: Lyapunov spectra of the layer map, of any map and of the flow;
- `rankdyn.sweep`: declarative TOML sweeps, and batches sharded over devices;
- `rankdyn.layer`: the layer and its parts (weights, masked softmax, norms, name tables);
- `rankdyn.plotting` (imported on demand: the only package that needs matplotlib).
"""

import typing as _typing

from ._lazy import lazy_attributes as _lazy_attributes

# The table of contents: imported on first use (rankdyn/_lazy.py), so `import rankdyn` loads no JAX.
if _typing.TYPE_CHECKING:
    from . import (
        checkpoints as checkpoints,
        equilibria as equilibria,
        layer as layer,
        masks as masks,
        metrics as metrics,
        sweep as sweep,
        theory as theory,
        weights as weights,
    )
    from ._errors import SolveError as SolveError, UsageError as UsageError
    from ._lyapunov._layer import lyapunov_spectrum as lyapunov_spectrum
    from ._lyapunov._qr import lyapunov_spectrum_map as lyapunov_spectrum_map
    from ._model._build import make_layer as make_layer
    from ._model._config import ModelConfig as ModelConfig
    from ._model._graph import graph_info as graph_info
    from ._model._layer import MLPWeights as MLPWeights, SelfAttentionLayer as SelfAttentionLayer
    from ._model._norms import (
        AbstractNorm as AbstractNorm,
        LayerNorm as LayerNorm,
        RMSNorm as RMSNorm,
        SphereNorm as SphereNorm,
    )
    from ._model._tokens import TokenSampler as TokenSampler, initial_tokens as initial_tokens
    from ._observe._metrics import (
        collapse_metrics as collapse_metrics,
        mu as mu,
        mu_normalized as mu_normalized,
    )
    from ._observe._stats import Summary as Summary
    from ._results import RESULTS as RESULTS
    from ._run._devices import use_cpu_devices as use_cpu_devices
    from ._run._simulate import Trajectory as Trajectory, simulate as simulate
    from ._theory._counterexample_search import search_value_matrix as search_value_matrix
    from ._version import __version__ as __version__
    from .equilibria import (
        EquilibriumSolution as EquilibriumSolution,
        StabilityReport as StabilityReport,
        equilibrium_census as equilibrium_census,
        exact_equilibria as exact_equilibria,
        find_equilibria as find_equilibria,
        stability as stability,
    )
    from .sweep import load_sweep_config as load_sweep_config, run_sweep as run_sweep


__getattr__, __dir__ = _lazy_attributes(__name__, __file__, globals())
