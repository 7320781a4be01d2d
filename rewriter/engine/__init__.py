"""The measurement engine: one way to run and measure a tree, shared by ``validate`` and diagnose's
search. A variant (the original tree, a rewritten candidate, or a baseline compiled in place) runs in
its own child process with empty compile caches (:mod:`.runner`, :mod:`.child`); :mod:`.measure`
runs a set of variants side by side: cold compile per shape, Dynamo's counters, numerics against the
eager reference (:mod:`.compare`), interleaved steady-state timing (:mod:`.timing`) and the
amortization rule (:mod:`.amortize`)."""
