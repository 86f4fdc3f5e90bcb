"""The mean-field limit: densities of tokens on the circle and their Fokker-Planck equation.

Public names: `rankdyn.meanfield`. Modules: `_circle` (the equation in the Fourier basis),
`_checks` (refusals before compute), `_solve` (`solve_density`, Diffrax IMEX) and `_stationary`
(`stationary_density` by Newton and its stability; the IMEX step map continued with
`rankdyn.equilibria.continue_branch`).
"""
