"""Trained checkpoints as rankdyn layer stacks (private; the public names are in `rankdyn.checkpoints`).

This file imports nothing: ``rankdyn checkpoints`` lists the installed checkpoints through
`rankdyn._trained._installed` without importing JAX.
"""
