"""accum: numerical checks, figures and probes for "Why Do Accumulated Transformations Extrapolate?".

Python API in brief::

    import numpy as np
    from accum import make_family, estimators
    fam = make_family("householder", dim=16, beta=1.0)
    est = estimators.coherence(fam, n_steps=32, n_samples=2000, rng=np.random.default_rng(0))
    print(est.mean[:4], est.stderr[:4])          # c(n) +- se; theory (1 - beta/d)^n
"""

from accum.simulations import estimators
from accum.simulations.families import FAMILIES, Family, make_family
from accum.simulations.measure import measure

__all__ = ["FAMILIES", "Family", "estimators", "make_family", "measure"]
