"""Theory targets: the paper's constructions and counterexamples (the 2-D example, equilibria of
every rank, the positive-measure set, the undirected search)."""
