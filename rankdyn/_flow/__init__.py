"""The self-attention flow on the sphere (continuous time): field, integration, observables, equilibria."""
