"""accum: numerical checks, figures and probes for "Why Do Accumulated Transformations Extrapolate?".

Python API in brief::

    import numpy as np
    from accum import make_family, estimators
    fam = make_family("householder", dim=16, beta=1.0)
    est = estimators.coherence(fam, n_steps=32, n_samples=2000, rng=np.random.default_rng(0))
    print(est.mean[:4], est.stderr[:4])          # c(n) +- se; theory (1 - beta/d)^n

The names below are loaded on first use (PEP 562), so ``import accum`` -- and every ``accum`` command, which
starts by importing this package -- costs nothing until the engine is needed.
"""

from __future__ import annotations

import importlib  # already loaded by the interpreter: nothing here delays the CLI's interrupt handlers (accum.cli)

#: public name -> (module, attribute or None for the module itself)
_LAZY = {
    "FAMILIES": ("accum.simulations.families", "FAMILIES"),
    "Family": ("accum.simulations.families", "Family"),
    "make_family": ("accum.simulations.families", "make_family"),
    "estimators": ("accum.simulations.estimators", None),
    "measure": ("accum.simulations.measure", "measure"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> object:
    """The public names of ``_LAZY``, imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'accum' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
