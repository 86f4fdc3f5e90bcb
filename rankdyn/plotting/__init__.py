"""Plots of rankdyn results. The only package that imports matplotlib.

Functions take results (dicts / arrays as the API returns them) and an optional ``ax``; they
never call ``plt.show()``. Each topic has its own module.
"""

from ._collapse import plot_metric_band as plot_metric_band
from ._sweep import plot_sweep_mu as plot_sweep_mu, plot_sweep_rank as plot_sweep_rank, plot_sweep_rate as plot_sweep_rate
