"""Running a layer over depth: the scan, `simulate`, memory checks, the chunk autotuner, host
devices and sharding, progress bars and results on disk.

Private: the public names are re-exported by `rankdyn`, `rankdyn.layer` and `rankdyn.sweep`. Imports
`rankdyn._model` and `rankdyn._observe`.
"""
