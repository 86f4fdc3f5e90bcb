"""What is measured: collapse metrics, singular values, the per-layer observer, streaming
statistics and the round-off tolerances.

Private: the public names are re-exported by `rankdyn.metrics`. The lowest floor of the
package: it imports only the support modules (`rankdyn._errors`).
"""
