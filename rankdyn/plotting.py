"""Plots of rankdyn results. The only package that imports matplotlib.

Functions take results (dicts / arrays as the API returns them) and an optional ``ax``; they
never call ``plt.show()``. Each topic has its own module; the rules every figure follows
(semi-log y for exponential decay, a y label on every panel, shared y limits for compared
panels, legends outside the data, the round-off floor as a band) live in ``_style``.
"""

from ._plotting._bifurcation import (
    plot_basin_map as plot_basin_map,
    plot_basins_across as plot_basins_across,
    plot_bifurcation as plot_bifurcation,
    plot_pair_phases as plot_pair_phases,
    two_angle_starts as two_angle_starts,
)
from ._plotting._collapse import plot_metric_band as plot_metric_band
from ._plotting._equilibria import (
    plot_equilibria_moduli as plot_equilibria_moduli,
    plot_equilibria_moduli_grid as plot_equilibria_moduli_grid,
)
from ._plotting._flow import (
    plot_flow_metrics as plot_flow_metrics,
    plot_order as plot_order,
    plot_phase_diagram as plot_phase_diagram,
    plot_staircases as plot_staircases,
)
from ._plotting._lyapunov import (
    plot_lyapunov_convergence as plot_lyapunov_convergence,
    plot_lyapunov_rates as plot_lyapunov_rates,
    plot_lyapunov_spectrum as plot_lyapunov_spectrum,
)
from ._plotting._pretrained import (
    plot_attention_sinks as plot_attention_sinks,
    plot_census as plot_census,
    plot_weight_spectra as plot_weight_spectra,
)
from ._plotting._reproduce_sim import (
    plot_band_panels as plot_band_panels,
    plot_rate_vs_dqk as plot_rate_vs_dqk,
    plot_rates_vs_bounds as plot_rates_vs_bounds,
    save_figure as save_figure,
)
from ._plotting._reproduce_theory import (
    plot_counterexample_2d as plot_counterexample_2d,
    plot_counterexample_2d_basins as plot_counterexample_2d_basins,
    plot_equilibria_ranks as plot_equilibria_ranks,
    plot_fraction_vs_horizon as plot_fraction_vs_horizon,
    plot_positive_measure as plot_positive_measure,
)
from ._plotting._runs import plot_runs as plot_runs, save_metric_figure as save_metric_figure
from ._plotting._stability import (
    plot_basin_fractions as plot_basin_fractions,
    plot_circle_trajectories as plot_circle_trajectories,
    plot_eigen_moduli as plot_eigen_moduli,
)
from ._plotting._style import (
    floor_band as floor_band,
    legend_outside as legend_outside,
    round_off_floor as round_off_floor,
)
from ._plotting._sweep import (
    plot_sweep_mu as plot_sweep_mu,
    plot_sweep_rank as plot_sweep_rank,
    plot_sweep_rate as plot_sweep_rate,
)
from ._plotting._undirected import plot_undirected as plot_undirected
