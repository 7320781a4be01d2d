"""stackpart: measure which performance ceiling binds, plan the one mechanism that attacks it, and
rewrite the model's source with LibCST (import name ``rewriter``; distribution ``stackpart``)."""

__version__ = "0.1.0"
