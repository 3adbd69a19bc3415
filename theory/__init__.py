"""Closed forms, bounds and assumption checks that the simulations are held against.

Modules (each result's docstring gives its statement, assumptions and source -- the paper where the issue
states the formula, "reconstruction" where it is derived here):

    so2          accumulated SO(2) angles: characteristic functions, path characteristic (i.i.d. and the
                 Markov transfer matrix), mean product, coherence, block far-score variance, far mass
    householder  I - beta w w^T: (1 - beta/d)^n, norm shrinkage, pair operator E[A (x) A], token tables
    groups       Haar (zero after one step), Givens, Lie walk (exact rate and the heat-kernel form)
    window       incoherence onset n_eps and mixing-window width; their independence of context length
    scores       far-score second moments, exact and bounded tails, the score gap as a function of d
    far          far mass, near weight, the norm-preservation bound, ALiBi's summable far mass
    values       value rotation: the far residual E|r|^2 (exact finite N and the large-N limit)
    moments      the generic theory of any family with i.i.d. steps, from E[A] and X -> E[A X A^T]
    forms        ``closed_forms(family)``: each built-in family's closed forms, picked by its class (the one place
                 the theory tells the families apart; the modules above take what differs as arguments)
    predict      ``prediction(quantity, family, ...)`` (closed form or estimated, with its standard error) and
                 the closed-form-only ``predict(quantity, family, **options)``, for ``accum verify`` and figures
    checks       Monte Carlo assumption checks for any family (``accum check``)
"""

from ._common import NoClosedForm
from .predict import QUANTITIES, Prediction, estimated, predict, prediction

__all__ = ["NoClosedForm", "Prediction", "QUANTITIES", "estimated", "predict", "prediction"]
