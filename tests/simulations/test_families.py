"""Family construction, validation and samplers (distribution checks with stated tolerances)."""

import dataclasses
import math
from typing import ClassVar

import numpy as np
import pytest
from conftest import off_default

from accum.simulations.families import FAMILIES, Family, make_family
from accum.simulations.laws import LAWS, Token
from accum.simulations.params import ParamError, ParamSpec, param_dataclass, parse_assignments
from accum.simulations.steps import AngleSteps
from accum.simulations.stats import z_threshold
from accum.theory import prediction

# each statistical check below may fail a correct sampler with probability 1e-5
K = z_threshold(1e-5)


@pytest.mark.parametrize("name,param,value,needle", [
    ("householder", "beta", "3", "'beta' = 3.0 is out of range; allowed: a finite number in [0, 2]"),
    ("householder", "beta", "-0.1", "'beta'"),
    ("so2-accumulated", "dim", "7", "'dim' = 7 is out of range; allowed: an even integer"),
    ("so2-accumulated", "sigma", "nan", "'sigma' = nan is not finite"),
    ("so2-accumulated", "law", "normal", "allowed: one of gaussian"),
    ("rope", "base", "1", "'base'"),
    ("haar", "dim", "2.5", "'dim': cannot read '2.5'"),
    ("haar", "colour", "1", "unknown parameter(s) colour"),
    ("householder", "table_seed", "9223372036854775808", "'table_seed' = 9223372036854775808 is out of range"),
    ("householder", "dim", "1e400", "'dim': cannot read '1e400'"),
    ("householder", "beta", "1e-400", "'beta': cannot read '1e-400'"),  # underflows: not read as 0
    ("householder", "beta", "-2.5e-999", "'beta': cannot read '-2.5e-999'"),
    ("so2-accumulated", "kappa", "5", "'kappa' = 5.0 applies only with law = vonmises, not law = 'gaussian'"),
    ("householder", "vocab", "4", "'vocab' = 4 applies only with w = token"),
    # finite upper bounds: a huge scale is refused up front with the allowed range (simulations.laws docstring)
    ("so2-accumulated", "sigma", "1e308", "'sigma' = 1e+308 is out of range; allowed: a finite number in [0, 1000]"),
    ("so2-accumulated", "mu", "-2e6", "'mu' = -2000000.0 is out of range; allowed: a finite number in [-1e+06, 1e+06]"),
    ("so2-accumulated", "a", "1e7", "'a' = 10000000.0 is out of range"),
    ("so2-accumulated", "gamma", "1e4", "'gamma' = 10000.0 is out of range"),
    ("so2-accumulated", "kappa", "1e7", "'kappa' = 10000000.0 is out of range"),
    ("so2-accumulated", "offset", "1e7", "'offset' = 10000000.0 is out of range"),
    ("so2-accumulated", "table_sigma", "1e4", "'table_sigma' = 10000.0 is out of range"),
    ("rope", "base", "1e13", "'base' = 10000000000000.0 is out of range; allowed: a finite number in (1, 1e+12]"),
    ("lie-walk", "sigma", "1e3", "'sigma' = 1000.0 is out of range; allowed: a finite number in [0, 100]"),
    ("givens", "sigma", "1e4", "'sigma' = 10000.0 is out of range; allowed: a finite number in [0, 1000]"),
])
def test_bad_parameters_name_the_parameter_and_range(name, param, value, needle):
    """Values as typed on a command line (``--param beta=3``)."""
    with pytest.raises(ParamError) as err:
        make_family(name, **parse_assignments([f"{param}={value}"]))
    assert needle in str(err.value)


def test_integers_are_read_exactly_and_unused_defaults_are_accepted():
    fam = make_family("householder", **parse_assignments(["w=token", "table_seed=12345678901234567", "dim=1e1"]))
    assert [make_family("householder", **parse_assignments([f"beta={text}"])).beta for text in ("0", "0e-400", "-0.0",
            "1e-310")] == [0.0, 0.0, 0.0, 1e-310]  # zero written as zero, and a subnormal, are read as they are
    assert fam.table_seed == 12345678901234567 and fam.dim == 10
    assert make_family("householder", table_seed=2**63 - 1, w="token").table_seed == 2**63 - 1
    # a saved config lists every parameter; the defaults of those that do not apply resolve again
    assert make_family("so2-accumulated", law="gaussian", kappa=4.0, stay=0.5).sigma == 0.5
    with pytest.raises(ParamError, match="'stay' = 0.9 applies only with source = markov"):
        make_family("so2-accumulated", law="token", stay=0.9)
    with pytest.raises(ParamError, match="'dim' = inf is not finite"):
        make_family("haar", dim=float("inf"))


@pytest.mark.parametrize("name,params,needle", [
    ("householder", dict(dim=4096, w="token", vocab=1_000_000), "vocab = 1000000 at dim = 4096 would need a 1000000 x 4096 "
     "token table; allowed: vocab <= 12207"),
    ("so2-accumulated", dict(dim=4096, law="token", vocab=1_000_000), "allowed: vocab <= 24414"),
    ("so2-accumulated", dict(dim=2, law="token", vocab=1_000_000, source="markov"), "allowed: vocab <= 5000"),
    ("so2-accumulated", dict(dim=2, law="token", vocab=20_000, source="markov"), "20000 x 20000 transition matrix"),
])
def test_token_tables_that_cannot_fit_are_refused_when_the_family_is_built(name, params, needle):
    """A table of vocab x (numbers per token) over MAX_TABLE_NUMBERS, or a Markov transition matrix over
    MAX_CHAIN_ENTRIES, is refused at construction (not tens of GiB into a measurement); the largest vocab that fits
    is accepted."""
    with pytest.raises(ParamError, match="vocab") as err:
        make_family(name, **params)
    assert needle in str(err.value)
    assert make_family("householder", dim=4096, w="token", vocab=12207).vocab == 12207
    assert make_family("so2-accumulated", dim=2, law="token", vocab=5000, source="markov").vocab == 5000
    assert make_family("so2-accumulated", dim=2, law="token", vocab=1_000_000).vocab == 1_000_000  # iid: no matrix


@pytest.mark.parametrize("name,params,needle", [
    (None, {}, "family name must be a string, got None; built-in: rope, so2-accumulated"),
    (123, {}, "family name must be a string, got 123"),
    ("so2-accumulated", dict(dim="16"), "'dim' = '16' is not a number; allowed: an even integer in [2, 4096]"),
    ("so2-accumulated", dict(sigma="0.5"), "'sigma' = '0.5' is not a number"),
    ("householder", dict(beta=True), "'beta' = True is not a number"),
    ("householder", dict(w=3), "'w' = 3 is not allowed; allowed: one of sphere, token"),
    ("fractions:Fraction", dict(numerator="3"), "'numerator': '3' is not a number"),
])
def test_library_parameters_are_numbers_not_text(name, params, needle):
    """The library takes a family name and numbers of each parameter's type; only command-line text
    (``parse_assignments``) is parsed."""
    with pytest.raises(ParamError) as err:
        make_family(name, **params)
    assert needle in str(err.value)
    assert make_family("so2-accumulated", **parse_assignments(["dim=16", "sigma=0.5"])).dim == 16


def test_unknown_family_and_bad_sample_sizes():
    with pytest.raises(ParamError, match="unknown family 'spiral'"):
        make_family("spiral")
    with pytest.raises(ParamError, match="'path' is not a class but a module"):
        make_family("os:path")
    with pytest.raises(ParamError, match="refused its parameters"):
        make_family("fractions:Fraction", colour=1)
    fam = make_family("haar", dim=3)
    with pytest.raises(ParamError, match="n_steps must be an integer >= 1"):
        fam.sample(np.random.default_rng(0), 0, 1)
    with pytest.raises(ParamError, match="batch must be an integer >= 1"):
        fam.sample(np.random.default_rng(0), 2, 0)


def test_every_builtin_satisfies_the_protocol_and_is_orthogonal_where_claimed():
    rng = np.random.default_rng(0)
    for name, cls in FAMILIES.items():
        fam = cls.from_params(dim=6)
        assert isinstance(fam, Family)
        mats = fam.sample(rng, 4, 3).dense()
        gram = np.swapaxes(mats, -1, -2) @ mats
        if name == "householder":
            continue  # beta = 1 contracts along w: checked in the next test
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(6), gram.shape), atol=1e-12)


def test_householder_contracts_along_w_only():
    rng = np.random.default_rng(1)
    steps = make_family("householder", dim=5, beta=0.5).sample(rng, 3, 2)
    mats = steps.dense()
    np.testing.assert_allclose(np.einsum("btij,btj->bti", mats, steps.w), 0.5 * steps.w, atol=1e-14)
    assert np.allclose(np.linalg.norm(steps.w, axis=-1), 1.0)


def test_haar_moments_diaconis_shahshahani():
    """Haar on O(d), d >= 2: E tr = 0 and E tr^2 = 1 (the number of invariants of V (x) V); on O(8) also
    E tr^4 = 3, the normal's (Diaconis & Shahshahani 1994: moments j <= d/2 of the trace are those of N(0, 1)); on
    SO(3) E tr^2 = 1 too, and SO(d) has det = +1.  Each a z test on 20000 draws, budget 1e-5 shared over the 9 of them."""
    from conftest import assert_within

    measured, stderr, expected = [], [], []
    for d, group, powers in ((2, "O", {1: 0.0, 2: 1.0}), (3, "O", {1: 0.0, 2: 1.0}), (8, "O", {1: 0.0, 2: 1.0, 4: 3.0}),
                             (3, "SO", {1: 0.0, 2: 1.0})):
        a = make_family("haar", dim=d, group=group).sample(np.random.default_rng(40 + d), 1, 20000).dense()[:, 0]
        tr = np.trace(a, axis1=-2, axis2=-1)
        for power, value in powers.items():
            x = tr**power
            measured.append(x.mean())
            stderr.append(x.std(ddof=1) / np.sqrt(x.size))
            expected.append(value)
    assert_within(measured, stderr, expected, 1e-5)
    special = make_family("haar", dim=4, group="SO").sample(np.random.default_rng(2), 1, 50).dense()[:, 0]
    np.testing.assert_allclose(np.linalg.det(special), 1.0, atol=1e-12)


def test_angle_laws_sample_their_characteristic_functions():
    # Independent closed forms of E exp(i theta) for each law (standard results), n = 40000 draws.
    n, rng = 40000, np.random.default_rng(3)
    from scipy.special import i0, i1
    cases = {
        "gaussian": ({"mu": 0.3, "sigma": 0.8}, np.exp(0.3j - 0.32)),
        "uniform": ({"a": 1.2}, np.sin(1.2) / 1.2),
        "vonmises": ({"mu": -0.4, "kappa": 2.0}, i1(2.0) / i0(2.0) * np.exp(-0.4j)),
        "wrapped-cauchy": ({"mu": 0.5, "gamma": 0.3}, np.exp(0.5j - 0.3)),
        "lattice": ({"m": 3, "offset": 0.2}, 0.0),
    }
    for law, (params, phi) in cases.items():
        theta = make_family("so2-accumulated", dim=2, law=law, **params).sample(rng, 1, n).theta.ravel()
        z = np.exp(1j * theta)
        for part in (np.real, np.imag):
            assert abs(part(z).mean() - part(phi)) <= K * part(z).std() / np.sqrt(n) + 1e-12, law
    lattice = make_family("so2-accumulated", dim=2, law="lattice", m=2).sample(rng, 5, 10).theta
    assert set(np.round(np.unique(lattice), 12)) <= {0.0, round(np.pi, 12)}


def test_markov_tokens_repeat_with_the_stated_probability():
    n = 200000
    x = Token(vocab=5, source="markov", stay=0.7).tokens(np.random.default_rng(4), 1, n)[0]
    repeat = (x[1:] == x[:-1]).astype(float)
    p = 0.7 + 0.3 / 5
    assert abs(repeat.mean() - p) <= K * np.sqrt(p * (1 - p) / (n - 1))
    iid = Token(vocab=5).tokens(np.random.default_rng(4), 1, n)[0]
    assert abs((iid[1:] == iid[:-1]).mean() - 0.2) <= K * np.sqrt(0.16 / n)


@pytest.mark.parametrize("name", list(LAWS))
def test_each_law_samples_its_own_characteristic_function(name):
    """Every law object against its own sampler, per plane, at k = 1 and 2 (d = 6, so rope-uniform and token differ
    by plane), with every numeric parameter off its default (``conftest.off_default``: a new law needs no entry
    here): |mean e^{ik theta} - phi| within K se (real and imaginary parts), plus the exact value for a point-mass
    case."""
    params = off_default(LAWS[name].PARAMS)
    law = LAWS[name](**params)
    assert make_family("so2-accumulated", dim=6, law=name, **params).angle_law() == law
    n = 40000
    theta = law.sample(np.random.default_rng(5), (n, 1, 3), 6)[:, 0]
    for k in (1, 2):
        z = np.exp(1j * k * theta)
        phi = law.characteristic(k, 6)
        assert phi.shape == (3,)
        for part in (np.real, np.imag):
            assert np.all(np.abs(part(z).mean(axis=0) - part(phi)) <= K * part(z).std(axis=0) / np.sqrt(n) + 1e-12)
    assert LAWS["lattice"](m=1, offset=0.5).characteristic(3, 2) == pytest.approx(np.exp(1.5j))


def test_only_the_markov_token_law_has_dependent_steps():
    assert [name for name, cls in LAWS.items() if not cls().iid] == []
    assert not Token(source="markov").iid and not make_family("so2-accumulated", law="token", source="markov").iid_steps


def standard_rope_scores(q: np.ndarray, k: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Scores of the usual RoPE (RoFormer, Su et al. eq. 13-15, interleaved pairs), written out plainly:
    rotate q_m by +m omega_b and k_n by +n omega_b in plane (2b, 2b+1), score q'_m . k'_n = q^T R((n - m) omega) k."""
    t, d = q.shape
    out = np.full((t, t), np.nan)
    for m in range(t):
        for n in range(m + 1):
            qr, kr = q[m].copy(), k[n].copy()
            for b, w in enumerate(omega):
                for vec, pos, src in ((qr, m, q[m]), (kr, n, k[n])):
                    c, s = np.cos(pos * w), np.sin(pos * w)
                    vec[2 * b], vec[2 * b + 1] = c * src[2 * b] - s * src[2 * b + 1], s * src[2 * b] + c * src[2 * b + 1]
            out[m, n] = qr @ kr
    return out


def test_standard_rope_is_accum_rope_with_the_frequencies_negated():
    """accum's rope rotates by +omega per step, s_ij = q_i^T R((i - j) omega) k_j; the usual RoPE gives
    q_i^T R((j - i) omega) k_j, i.e. accum's rope with omega -> -omega (conventions module docstring).
    Odd length, asymmetric q != k per token, d = 6."""
    rng = np.random.default_rng(8)
    t, d = 7, 6
    q, k = rng.normal(size=(2, t, d))
    rope = make_family("rope", dim=d, base=100.0)
    accum_steps = rope.sample(rng, t, 1)
    omega = accum_steps.theta[0, 0]
    np.testing.assert_allclose(AngleSteps(-accum_steps.theta).scores(q[None], k[None])[0],
                               standard_rope_scores(q, k, omega), atol=1e-12)
    accum_scores = accum_steps.scores(q[None], k[None])[0]
    assert not np.allclose(np.tril(accum_scores), np.tril(standard_rope_scores(q, k, omega)))  # the directions differ
    np.testing.assert_allclose(accum_scores, standard_rope_scores(q, k, -omega), atol=1e-12)


@pytest.mark.parametrize("cls", [*FAMILIES.values(), *LAWS.values()], ids=[*FAMILIES, *LAWS])
def test_param_dataclass_fields_are_the_declared_parameters(cls):
    """``param_dataclass`` makes one frozen field per ParamSpec: same names, order, defaults, and Python type."""
    fields = [(f.name, f.default, f.type) for f in dataclasses.fields(cls)]
    types = {"int": int, "float": float, "choice": str}
    assert fields == [(spec.name, spec.default, types[spec.kind]) for spec in cls.PARAMS]
    first = cls.PARAMS[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cls(), first.name, first.default)


def test_param_dataclass_keeps_class_constants_and_own_annotations():
    @param_dataclass
    class Law:
        """A law."""

        name: ClassVar[str] = "law"
        PARAMS: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("width", "float", 2.0, "width", lo=0.0), ParamSpec("m", "int", 3, "m"))

    assert [f.name for f in dataclasses.fields(Law)] == ["width", "m"]
    assert Law(m=5) == Law(2.0, 5) and Law.name == "law" and Law.__doc__ == "A law."


@pytest.mark.parametrize("params,needle", [
    (dict(dim=0), "'dim' = 0 is out of range; allowed: an integer in [1, 4096]"),
    (dict(dim=-1), "'dim' = -1 is out of range"),
    (dict(signed=5), "'signed' = 5 is out of range; allowed: an integer in [0, 1]"),
    (dict(dim="8"), "'dim' = '8' is not a number"),
    (dict(dim=float("nan")), "'dim' = nan is not finite"),
])
def test_a_param_dataclass_built_directly_checks_its_ranges(params, needle):
    """A user family made with ``param_dataclass`` and constructed directly (not through make_family) gets the
    same range checks as the built-ins (docs/families.md: "Adding a family")."""
    from accum.simulations.examples import SignedPermutation

    with pytest.raises(ParamError) as err:
        SignedPermutation(**params)
    assert needle in str(err.value)
    assert SignedPermutation(dim=np.int64(4)).dim == 4 and type(SignedPermutation(dim=np.int64(4)).dim) is int


def test_param_dataclass_runs_the_classes_own_post_init_after_validating():
    @param_dataclass
    class Law:
        PARAMS: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("lo", "float", 0.0, "lo"), ParamSpec("hi", "float", 1.0, "hi"))

        def __post_init__(self) -> None:
            if self.hi <= self.lo:
                raise ParamError("hi must exceed lo")

    assert Law(1, 2).lo == 1.0
    with pytest.raises(ParamError, match="hi must exceed lo"):
        Law(2.0, 1.0)
    with pytest.raises(ParamError, match="'hi' = inf is not finite"):
        Law(hi=float("inf"))


# ------------------------------------------------------------------ Haar and PaTH against outside values

def _haar_statistics(a: np.ndarray) -> dict[str, np.ndarray]:
    """Scalar statistics of (n, d, d) matrices whose law the two-sample test compares: the trace and two entries."""
    return {"trace": np.trace(a, axis1=-2, axis2=-1), "a00": a[:, 0, 0], "a_last_0": a[:, -1, 0]}


HAAR_CASES = [(2, "O"), (3, "O"), (5, "O"), (2, "SO"), (3, "SO"), (4, "SO")]


def test_haar_steps_match_scipys_samplers_by_a_two_sample_test():
    """The haar family against scipy.stats.ortho_group / special_ortho_group (an outside sampler): two-sample
    Kolmogorov-Smirnov tests of the trace and two entries, 3000 draws each, at a false-failure budget of 1e-5
    shared over the 18 tests.  Power: the same tests reject QR without the sign fix (Mezzadri 2007: not Haar)
    with p < 1e-20 for every case."""
    from scipy import stats

    n, budget = 3000, 1e-5
    level = budget / (len(HAAR_CASES) * 3)
    for d, group in HAAR_CASES:
        ours = make_family("haar", dim=d, group=group).sample(np.random.default_rng(10 + d), 1, n).dense()[:, 0]
        outside = (stats.special_ortho_group if group == "SO" else stats.ortho_group).rvs(
            dim=d, size=n, random_state=np.random.default_rng(20 + d))
        unfixed = np.linalg.qr(np.random.default_rng(30 + d).normal(size=(n, d, d)))[0]
        mine, theirs, bad = (_haar_statistics(a) for a in (ours, outside, unfixed))
        for name in mine:
            assert stats.ks_2samp(mine[name], theirs[name]).pvalue > level, (d, group, name)
        assert min(stats.ks_2samp(bad[name], theirs[name]).pvalue for name in bad) < 1e-20, (d, group)


def test_haar_so3_rotation_angle_has_the_weyl_density():
    """A Haar rotation of SO(3) turns by theta in [0, pi] with density (1 - cos theta) / pi (Weyl's integration
    formula), CDF (theta - sin theta) / pi; tr = 1 + 2 cos theta.  One-sample KS on 5000 draws, budget 1e-5; the
    uniform angle (a plausible wrong sampler) is rejected."""
    from scipy import stats

    a = make_family("haar", dim=3, group="SO").sample(np.random.default_rng(3), 1, 5000).dense()[:, 0]
    theta = np.arccos(np.clip((np.trace(a, axis1=-2, axis2=-1) - 1) / 2, -1, 1))
    cdf = lambda t: (t - np.sin(t)) / np.pi  # noqa: E731
    assert stats.kstest(theta, cdf).pvalue > 1e-5
    assert stats.kstest(np.random.default_rng(4).uniform(0, np.pi, 5000), cdf).pvalue < 1e-20


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0, 1.7, 2.0])
def test_path_factor_spectrum_by_hand(beta):
    """A = I - beta w w^T (unit w, PaTH): A w = (1 - beta) w and A u = u for u orthogonal to w, so its eigenvalues
    are 1 - beta (once) and 1 (d - 1 times), det A = 1 - beta, and A^T A - I = ((1 - beta)^2 - 1) w w^T vanishes
    only at beta in {0, 2}."""
    d = 5
    steps = make_family("householder", dim=d, beta=beta).sample(np.random.default_rng(7), 1, 1)
    a, w = steps.dense()[0, 0], steps.w[0, 0]
    assert np.linalg.norm(w) == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(a @ w, (1 - beta) * w, atol=1e-14)
    u = np.random.default_rng(8).normal(size=d)
    u -= (u @ w) * w
    np.testing.assert_allclose(a @ u, u, atol=1e-14)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(a)), sorted([1 - beta] + [1.0] * (d - 1)), atol=1e-13)
    assert np.linalg.det(a) == pytest.approx(1 - beta, abs=1e-13)
    assert np.linalg.norm(a.T @ a - np.eye(d), 2) == pytest.approx(abs((1 - beta) ** 2 - 1), abs=1e-13)
    assert (np.linalg.norm(a.T @ a - np.eye(d)) < 1e-12) == (beta in (0.0, 2.0))


def test_path_products_run_in_score_order_by_hand():
    """d = 2, beta = 2, w_1 = e_1 (angle 0), w_2 at angle pi/8: each step is a reflection and
    A_2 A_1 = R(2 (pi/8 - 0)) = R(pi/4) (two reflections make a rotation by twice the angle between them), so with
    q = e_2, k = e_1, s_20 = q^T A_2 A_1 k = sin(pi/4); the other order A_1 A_2 = R(-pi/4) would give -sin(pi/4)."""
    from accum.simulations.steps import HouseholderSteps

    a = np.pi / 8
    w = np.array([[[1.0, 0.0], [1.0, 0.0], [np.cos(a), np.sin(a)]]])  # token 0's step never enters a score
    steps = HouseholderSteps(w, np.full((1, 3), 2.0))
    q, k = np.tile([0.0, 1.0], (1, 3, 1)), np.tile([1.0, 0.0], (1, 3, 1))
    s = steps.scores(q, k)[0]
    assert s[2, 0] == pytest.approx(math.sqrt(0.5), abs=1e-14)
    # one reflection alone: A_1 = diag(-1, 1) gives e_2^T A_1 e_1 = 0; A_2 = [[-cos 2a, -sin 2a], [-sin 2a, cos 2a]]
    assert s[1, 0] == pytest.approx(0.0, abs=1e-14) and s[2, 1] == pytest.approx(-math.sin(2 * a), abs=1e-14)
    np.testing.assert_allclose(steps.dense()[0, 2] @ steps.dense()[0, 1],
                               [[math.cos(2 * a), -math.sin(2 * a)], [math.sin(2 * a), math.cos(2 * a)]], atol=1e-15)


def test_householder_mean_step_is_one_minus_beta_over_d():
    """w uniform on the sphere: E[w w^T] = I / d (symmetry, trace 1), so E[A] = (1 - beta/d) I and, for i.i.d. steps,
    c(n) = (1 - beta/d)^n q.k -- the theory's closed form against that hand derivation."""
    d, beta, n = 5, 0.7, 6
    got = prediction("coherence", make_family("householder", dim=d, beta=beta), steps=n).value
    np.testing.assert_allclose(got, [(1 - beta / d) ** j for j in range(n + 1)], rtol=1e-14)


def test_structured_sample_reports_equal_the_dense_steps_report():
    """``sample_report`` (max |A^T A - I|, max ||A||_2) of Householder steps, from w and beta alone, against the plain
    fp64 one of the same steps as dense matrices: non-unit w, beta on both sides of 1 and past 2, batch 3 != steps 5
    != d 4 (an axis mixed up shows as a wrong number or a shape error)."""
    from accum.simulations.steps import DenseSteps, HouseholderSteps

    rng = np.random.default_rng(12)
    w = rng.normal(size=(3, 5, 4)) * rng.uniform(0.5, 1.5, size=(3, 5, 1))
    beta = rng.uniform(0.2, 2.4, size=(3, 5))
    steps = HouseholderSteps(w, beta)
    dense = DenseSteps(steps.dense())
    dense_ortho, dense_top = dense.sample_report(4)
    for exact_dim in (4, 2):  # eigvalsh, then the bound past exact_dim (the structured form is exact either way)
        ortho, top = steps.sample_report(exact_dim)
        assert ortho == pytest.approx(dense_ortho, rel=1e-12) and top == pytest.approx(dense_top, rel=1e-12)
    # the dense report past exact_dim is the bound ||A||_2 <= sqrt(1 + d max|A^T A - I|), by hand
    assert dense.sample_report(2) == pytest.approx((dense_ortho, math.sqrt(1.0 + 4 * dense_ortho)), rel=1e-12)
    # ||A^T A - I||_F per step from (w, beta) alone, against the dense matrices
    a = steps.dense()
    want = np.linalg.norm(np.swapaxes(a, -1, -2) @ a - np.eye(4), axis=(-2, -1))
    np.testing.assert_allclose(steps.orthogonality_drift(), want, rtol=1e-10)
    np.testing.assert_allclose(dense.orthogonality_drift(), want, rtol=1e-12)
    # rotations: A^T A - I is rounding only, in the angle form and as dense matrices
    angles = make_family("so2-accumulated", dim=6, mu=0.3, sigma=2.0).sample(rng, 4, 3)
    assert np.max(angles.orthogonality_drift()) < 1e-14 and np.max(DenseSteps(angles.dense()).orthogonality_drift()) < 1e-14


def test_dense_draws_go_in_pieces_of_the_stated_work():
    """``dense_in_pieces`` calls ``draw`` on consecutive pieces of PIECE_FLOPS / d^3 matrices (a QR is ~d^3 flops):
    at d = 64 and PIECE_FLOPS = 5e7, 190 a piece, so 1000 matrices in 5 full pieces and one of 50."""
    from accum.simulations import params
    from accum.simulations.families import dense_in_pieces

    calls = []

    def draw(count):
        calls.append(count)
        return np.zeros((count, 64, 64))

    assert params.PIECE_FLOPS == 5e7
    assert dense_in_pieces(draw, (10, 100), 64).shape == (10, 100, 64, 64)
    assert calls == [190] * 5 + [50]


def test_path_memory_is_the_larger_of_the_vectors_and_the_steps():
    """``path_floats``: (n + 1) d numbers of vectors or n steps of the form's size, by hand at d = 8, n = 10."""
    from accum.simulations.montecarlo import path_floats
    from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps

    assert path_floats(AngleSteps, 8, 10) == 88  # 10 steps of 4 angles: 40 < 11 x 8
    assert path_floats(HouseholderSteps, 8, 10) == 88  # 10 directions of 8: 80 < 88
    assert path_floats(DenseSteps, 8, 10) == 640  # 10 matrices of 64


def test_a_markov_source_that_never_leaves_its_token_is_refused():
    """stay lies in [0, 1): stay = 1 would repeat the first token for ever (no stationary mixing), so it is refused
    with the parameter's name and range; just under 1 is accepted."""
    with pytest.raises(ParamError, match="stay"):
        make_family("so2-accumulated", law="token", source="markov", stay=1.0)
    assert make_family("so2-accumulated", law="token", source="markov", stay=0.999).stay == 0.999


def test_a_family_summary_is_the_first_line_of_its_docstring():
    """``accum families`` prints each family's summary: the first line of its class docstring, not a later one."""
    assert make_family("householder", dim=4).summary() == type(make_family("householder", dim=4)).__doc__.strip().splitlines()[0]

    from accum.simulations.families import BuiltinFamily

    class Described(BuiltinFamily):
        """One line that says what it is.

        A longer body, with its own last line."""

    assert Described.summary() == "One line that says what it is."


def test_rope_torch_sampler_gives_the_numpy_angles():
    """RoPE's device sampler draws nothing: theta_tb = omega_b, (batch, n_steps, d/2), as the numpy sampler."""
    import torch

    fam = make_family("rope", dim=8)
    angles = fam.torch_angle_sampler(torch.device("cpu"), torch.Generator())(3, 2).numpy()
    assert angles.shape == (2, 3, 4)
    assert np.array_equal(angles, fam.sample(np.random.default_rng(0), 3, 2).theta)


def test_parameter_ranges_hold_at_their_ends():
    """The documented ends: the lattice offset up to 1e6, a table seed up to 2^63 - 1, the Householder token table's
    seed 0 by default."""
    make_family("so2-accumulated", law="lattice", offset=1e6)
    with pytest.raises(ParamError, match="offset"):
        make_family("so2-accumulated", law="lattice", offset=1e6 + 0.5)
    make_family("so2-accumulated", law="token", table_seed=2**63 - 1)
    with pytest.raises(ParamError, match="table_seed"):
        make_family("so2-accumulated", law="token", table_seed=2**63)
    assert make_family("householder", w="token").table_seed == 0


def test_a_user_parameter_beyond_the_float_range_is_refused_not_raised():
    """An int too large for a float (10^400) is not finite: one ParamError naming it, not an OverflowError."""
    from accum.simulations.families import _number

    with pytest.raises(ParamError, match="not finite"):
        _number("scale", 10**400)
    assert _number("scale", 3) == 3 and _number("scale", 2.5) == 2.5
