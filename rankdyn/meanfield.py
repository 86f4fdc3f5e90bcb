"""The mean-field limit: densities of tokens on the circle, their Fokker-Planck equation, its transitions.

As the number of tokens grows, the empirical measure of the flow (`rankdyn.flow`, complete mask,
$Q = K = V = I$) becomes a density $\\rho$ solving a continuity equation; noise $\\sigma\\,dB$ on each
token adds $\\frac{\\sigma^2}{2}\\Delta\\rho$ (docs/theory.md, "Mean-field densities").
On the circle ($d = 2$):

- `solve_density`: the equation in time (Fourier pseudo-spectral, Diffrax IMEX), batched.
- `stationary_density`: stationary densities by Newton, with the eigenvalues of the linearised operator.
- `density_step_map` / `continue_density`: their branches in $\\sigma$ or $\\beta$ by
  `rankdyn.equilibria.continue_branch`, whose branch points are the uniform state's transitions.
"""

from ._meanfield._circle import (
    KERNEL_EPS as KERNEL_EPS,
    CircleDensityModel as CircleDensityModel,
    density_coefficients as density_coefficients,
    density_values as density_values,
    kernel_modes as kernel_modes,
)
from ._meanfield._solve import DensitySolution as DensitySolution, solve_density as solve_density
from ._meanfield._stationary import (
    StationaryDensity as StationaryDensity,
    continue_density as continue_density,
    density_step_map as density_step_map,
    stationary_density as stationary_density,
)
