"""The mean-field limit: densities of tokens on the circle and on S^2, their Fokker-Planck equation.

As the number of tokens grows, the empirical measure of the flow (`rankdyn.flow`, complete mask,
$Q = K = V = I$) becomes a density $\\rho$ solving a continuity equation; noise $\\sigma\\,dB$ on each
token adds $\\frac{\\sigma^2}{2}\\Delta\\rho$ (docs/theory.md, "Mean-field densities").
On the circle ($d = 2$):

- `solve_density`: the equation in time (Fourier pseudo-spectral, Diffrax IMEX), batched.
- `stationary_density`: stationary densities by Newton, with the eigenvalues of the linearised operator.
- `density_step_map` / `continue_density`: their branches in $\\sigma$ or $\\beta$ by
  `rankdyn.equilibria.continue_branch`, whose branch points are the uniform state's transitions.

On the sphere $S^2$ ($d = 3$; spherical harmonics with s2fft, ``pip install "rankdyn[meanfield]"``):

- `solve_sphere_density`: the equation in time (s2fft's Gauss-Legendre transforms, Diffrax IMEX).
- `stationary_zonal_density`, `zonal_step_map`, `continue_zonal_density`: axisymmetric (zonal,
  Legendre) densities at rest and along branches (these need no s2fft).
"""

from ._meanfield._circle import (
    KERNEL_EPS as KERNEL_EPS,
    CircleDensityModel as CircleDensityModel,
    density_coefficients as density_coefficients,
    density_values as density_values,
    kernel_modes as kernel_modes,
)
from ._meanfield._solve import DensitySolution as DensitySolution, solve_density as solve_density
from ._meanfield._sphere import (
    sphere_density_coefficients as sphere_density_coefficients,
    sphere_density_values as sphere_density_values,
    sphere_grid as sphere_grid,
    to_s2fft as to_s2fft,
)
from ._meanfield._sphere_kernel import sphere_band_limit as sphere_band_limit
from ._meanfield._sphere_solve import (
    SphereDensitySolution as SphereDensitySolution,
    solve_sphere_density as solve_sphere_density,
)
from ._meanfield._stationary import (
    StationaryDensity as StationaryDensity,
    continue_density as continue_density,
    density_step_map as density_step_map,
    stationary_density as stationary_density,
)
from ._meanfield._zonal_stationary import (
    ZonalStationaryDensity as ZonalStationaryDensity,
    continue_zonal_density as continue_zonal_density,
    stationary_zonal_density as stationary_zonal_density,
    zonal_step_map as zonal_step_map,
)
