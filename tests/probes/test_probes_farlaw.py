"""probes.farlaw: the far mass predicted from a step law and 1x statistics, on synthetic attention whose answer is
known (queries and keys i.i.d., steps from the law: every assumption of the prediction holds), and its engine against
the closed forms of accum.theory and the plain transport."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from accum.probes import farlaw
from accum.probes.analysis import far_mass
from accum.probes.steplaw import HeadLaw
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.theory import so2
from accum.theory.forms import plane_angles

torch.set_num_threads(1)

L, D = 16, 8
#: two-sided z for each comparison: 20 comparisons at 0.1% each, a false-failure budget of 2% for the file
Z = 3.3


def synthetic(family, length: int, batch: int, score_sd: float, slope: float, rng: np.random.Generator):
    """Queries and keys i.i.d. N(0, score_sd) per coordinate (so q.k / sqrt(d) has sd score_sd), steps from the
    family, ALiBi bias -slope (i - j): q, k (B, 1, T, d) and the causal softmax weights (B, 1, T, T)."""
    scale = math.sqrt(score_sd)
    q, k = rng.normal(0, scale, (batch, length, D)), rng.normal(0, scale, (batch, length, D))
    s = family.sample(rng, length, batch).scores(q, k) / math.sqrt(D)
    lag = np.arange(length)[:, None] - np.arange(length)[None, :]
    s = np.where(lag >= 0, s - slope * lag, -np.inf)
    return torch.from_numpy(q)[:, None], torch.from_numpy(k)[:, None], torch.softmax(torch.from_numpy(s), -1)[:, None]


CASES = {
    "uniform(pi): incoherent after one step": (make_family("so2-accumulated", dim=D, law="uniform", a=math.pi), 0.0),
    "rope-uniform: slow planes coherent": (make_family("so2-accumulated", dim=D, law="rope-uniform", base=100.0), 0.0),
    "rope: deterministic": (make_family("rope", dim=D, base=100.0), 0.0),
    "nope with an ALiBi slope": (make_family("nope", dim=D), 0.05),
    "householder beta 1.5: contracting": (make_family("householder", dim=D, beta=1.5), 0.0),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("score_sd", [0.5, 2.0])
def test_law_prediction_matches_synthetic_attention(name, score_sd):
    """From 2L windows' near statistics and the law alone, the far mass at 2L and 8L equals the far mass of the
    synthetic attention measured on 8L windows, within Z combined standard errors (the prediction's over its
    sampled queries, the measurement's over windows)."""
    family, slope = CASES[name]
    rng = np.random.default_rng(7)
    q, k, w = synthetic(family, 2 * L, 256, score_sd, slope, rng)
    stats = farlaw.near_statistics(q, k, w, L)[0]
    pred = farlaw.far_curve(HeadLaw(family, slope, name), stats, L, 7 * L, 1024, rng)
    _, _, long_w = synthetic(family, 8 * L, 96, score_sd, slope, rng)
    per_window = np.array([float(far_mass(long_w[b:b + 1], L)[0]) for b in range(long_w.shape[0])])
    got, se = pred.at([8], L)[0], pred.standard_error([8], L)[0]
    want, want_se = per_window.mean(), per_window.std(ddof=1) / math.sqrt(per_window.size)
    assert abs(got - want) < Z * math.hypot(se, want_se), (name, score_sd, got, want, se, want_se)
    in_sample = float(far_mass(w, L)[0])  # 2L: the measurement of the 256 windows the statistics came from
    assert abs(pred.at([2], L)[0] - in_sample) < Z * pred.standard_error([2], L)[0] + 0.01, (name, in_sample)


def test_mean_exp_score_per_lag_is_the_bessel_closed_form():
    """For one query and one key, the simulated mean of e^{s_n} at every far lag equals accum.theory.so2's Bessel form
    E exp(s0 q^T P_n k) (far_mass_terms) for the rope-uniform law (planes mixing at their own rates), within Z se."""
    family = make_family("so2-accumulated", dim=D, law="rope-uniform", base=30.0)
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=D), rng.normal(size=D)
    stats = farlaw.HeadStats(q[None], np.zeros(1), k[None])
    chunks = list(farlaw.far_exp_ratios(HeadLaw(family, 0.0, "test"), stats, L, 40, 20000, rng))
    ratios = np.concatenate([c[1] for c in chunks], axis=1)  # (streams, 40): e^{s_n}, lags L..L+39
    s0 = float(np.linalg.norm(q) * np.linalg.norm(k)) / math.sqrt(D)
    terms, _ = so2.far_mass_terms(plane_angles(family), L + 39, s0, q / np.linalg.norm(q), k / np.linalg.norm(k))
    want = terms[L - 1:] * math.exp(s0)
    se = ratios.std(axis=0, ddof=1) / math.sqrt(ratios.shape[0])
    assert np.all(np.abs(ratios.mean(axis=0) - want) < Z * se), (ratios.mean(axis=0) - want) / se


@pytest.mark.parametrize("family", [make_family("so2-accumulated", dim=6, law="uniform", a=2.0),
                                    make_family("householder", dim=5, beta=1.3)], ids=["angles", "householder"])
def test_path_scores_against_the_transport(family):
    """The closed-form angle route and the transport route equal the plain fp64 transport, odd sizes, asymmetric
    query and keys."""
    rng = np.random.default_rng(1)
    steps = family.sample(rng, 7, 3)
    x, keys = rng.normal(size=(3, family.dim)), rng.normal(size=(3, 7, family.dim))
    rows = np.array([0, 2, 3, 6])
    s, carried = farlaw.path_scores(steps, x, keys[:, rows], rows)
    path = steps.transposed().transport(x)
    np.testing.assert_allclose(s, np.einsum("snd,snd->sn", path[:, 1:][:, rows], keys[:, rows]), rtol=0, atol=5e-6)
    np.testing.assert_allclose(carried, path[:, -1], rtol=0, atol=1e-12)


def test_coherent_fraction_premise():
    """C(n) = 1 for RoPE at every lag (|psi| = 1), and for U(-a, a) steps C(n) = |sinc(a)|^n up to the estimate's noise
    floor: the premise flags RoPE and passes the mixing law."""
    rng = np.random.default_rng(2)
    queries = rng.normal(size=(64, D))
    rope = farlaw.coherent_fraction(HeadLaw(make_family("rope", dim=D), 0.0, ""), queries, 12, 64, rng)
    np.testing.assert_allclose(rope, 1.0, atol=1e-12)
    law = HeadLaw(make_family("so2-accumulated", dim=D, law="uniform", a=1.0), 0.0, "")
    got = farlaw.coherent_fraction(law, queries, 12, 4096, rng)
    want = abs(math.sin(1.0)) ** np.arange(13)
    assert np.all(np.abs(got - want) < 5.0 / math.sqrt(4096) + 1e-12), got - want
    stats = farlaw.HeadStats(queries, np.zeros(64), rng.normal(size=(64, D)))
    flags = {name: farlaw.predict_head(law, stats, L, [2], 16, rng)["applies"]
             for name, law in (("rope", HeadLaw(make_family("rope", dim=D), 0.0, "")), ("mixing", law))}
    assert flags == {"rope": False, "mixing": True}   # C(L) = 1 and sin(1)^16 = 0.06, against PREMISE = 0.5


def test_strided_far_lags_keep_the_expected_far_sum(monkeypatch):
    """Scoring one lag per block of STRIDE beyond STRIDE_FROM x L (here from 2L) leaves E[S_N] unchanged: the mean far
    sum over 7L far lags is within Z standard errors of the fully scored one (rope-uniform law, score sd 1).  (The
    concave map's extra cost, F^2 (1 - F) CV^2 (STRIDE - 1) / N, is negligible at the N >= 64 L where it is used.)"""
    family = make_family("so2-accumulated", dim=D, law="rope-uniform", base=100.0)
    rng = np.random.default_rng(5)
    q, k, w = synthetic(family, 2 * L, 128, 1.0, 0.0, rng)
    stats = farlaw.near_statistics(q, k, w, L)[0]
    law = HeadLaw(family, 0.0, "test")

    def far_sums():
        return sum(c[1].sum(axis=1) for c in farlaw.far_exp_ratios(law, stats, L, 7 * L, 4096, rng))

    full = far_sums()
    monkeypatch.setattr(farlaw, "STRIDE_FROM", 2)
    strided = far_sums()
    se = math.hypot(full.std(ddof=1), strided.std(ddof=1)) / math.sqrt(full.size)
    assert abs(strided.mean() - full.mean()) < Z * se, (strided.mean(), full.mean(), se)
    rows, owner = farlaw.scored_lags(np.arange(1, 4 * L + 1), L, rng)
    # far lags L..4L: L dense ones below 2L, then 2L + 1 lags in blocks of STRIDE
    assert owner.size == 3 * L + 1 and np.all(np.diff(owner) >= 0) and rows.size == L + math.ceil((2 * L + 1) / farlaw.STRIDE)


def test_near_statistics_are_the_explicit_log_sum_exp_over_lags_below_L():
    """log Z_i^near = log sum_{j = i-L+1}^{i} e^{s_ij} for the queries i in [L, 2L) of causal softmax attention with
    asymmetric q != k, written out query by query in fp64; the key pool is every key of the windows."""
    rng = np.random.default_rng(4)
    b, h, t, d = 2, 3, 2 * L, D
    q = torch.from_numpy(rng.normal(0.3, 1.0, size=(b, h, t, d)))
    k = torch.from_numpy(rng.normal(-0.2, 1.3, size=(b, h, t, d)))
    s = q @ k.transpose(-1, -2) / math.sqrt(d) - 0.07 * torch.arange(t, dtype=torch.float64)  # only the weights carry it
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    w = torch.softmax(s, dim=-1)
    got = farlaw.near_statistics(q, k, w, L)
    for head in range(h):
        want = [math.log(sum(math.exp(float(q[bi, head, i] @ k[bi, head, j]) / math.sqrt(d) - 0.07 * j
                                      + 0.07 * i) for j in range(i - L + 1, i + 1)))
                for bi in range(b) for i in range(L, t)]
        np.testing.assert_allclose(got[head].log_z_near, want, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(got[head].keys, k[:, head].reshape(-1, d).numpy())
        np.testing.assert_array_equal(got[head].queries, q[:, head, L:].reshape(-1, d).numpy())


def test_c4_sd_by_hand():
    """C4's far-score sd sqrt(E|q|^2 E|k|^2 / d) / sqrt(d): queries of squared norms 4 and 2 (mean 3), keys of 1 and
    2 (mean 1.5), d = 2: sqrt(4.5 / 2) / sqrt(2) = 0.75 sqrt(2)."""
    queries = np.array([[2.0, 0.0], [1.0, -1.0]])
    keys = np.array([[1.0, 0.0], [1.0, 1.0]])
    stats = farlaw.HeadStats(queries, np.zeros(2), keys)
    assert farlaw.c4_sd(stats) == pytest.approx(0.75 * math.sqrt(2.0), rel=1e-15)


def test_far_exp_ratios_take_one_stream_or_more():
    """streams counts queries from 1 up: one stream gives one row of ratios per chunk; 0 is refused naming it, and so
    are statistics without a query."""
    family = make_family("so2-accumulated", dim=D, law="rope-uniform", base=30.0)
    rng = np.random.default_rng(4)
    stats = farlaw.HeadStats(rng.normal(size=(1, D)), np.zeros(1), rng.normal(size=(1, D)))
    chunks = list(farlaw.far_exp_ratios(HeadLaw(family, 0.0, "test"), stats, L, 5, 1, rng))
    assert np.concatenate([c[1] for c in chunks], axis=1).shape == (1, 5)
    with pytest.raises(ParamError, match="streams"):
        list(farlaw.far_exp_ratios(HeadLaw(family, 0.0, "test"), stats, L, 5, 0, rng))
    empty = farlaw.HeadStats(np.zeros((0, D)), np.zeros(0), rng.normal(size=(1, D)))
    with pytest.raises(ParamError, match="stats no query with a usable near partition function"):
        list(farlaw.far_exp_ratios(HeadLaw(family, 0.0, "test"), empty, L, 5, 1, rng))


def test_a_heads_prediction_simulates_the_far_lags_of_its_longest_length_and_no_more():
    """At lengths 2L and 5L the far lags run from L to 5L - 1: (5 - 1) L of them.  predict_head's far mass and
    far-score sd are the coherence draw then ``far_curve`` over exactly those lags, from the same generator."""
    family = make_family("so2-accumulated", dim=D, law="rope-uniform", base=30.0)
    rng = np.random.default_rng(5)
    stats = farlaw.HeadStats(rng.normal(size=(40, D)), rng.normal(size=40), rng.normal(size=(60, D)))
    law = HeadLaw(family, 0.02, "test")
    got = farlaw.predict_head(law, stats, L, [2, 5], 64, np.random.default_rng(11))
    rng = np.random.default_rng(11)
    farlaw.coherent_fraction(law, stats.queries, L, farlaw.COHERENCE_PATHS, rng)
    far = farlaw.far_curve(law, stats, L, 4 * L, 64, rng)
    assert got["far_mass"] == list(far.at([2, 5], L)) and got["far_score_sd"] == far.far_score_sd


def test_a_heads_prediction_takes_lengths_of_2x_or_more():
    """Far mass needs far lags: a length under 2L (or none) is refused naming multipliers; 2L itself is accepted."""
    family = make_family("so2-accumulated", dim=D, law="uniform", a=1.0)
    rng = np.random.default_rng(6)
    stats = farlaw.HeadStats(rng.normal(size=(10, D)), rng.normal(size=10), rng.normal(size=(10, D)))
    law = HeadLaw(family, 0.0, "test")
    for bad in ([], [1, 4], [1]):
        with pytest.raises(ParamError, match="multipliers"):
            farlaw.predict_head(law, stats, L, bad, 8, rng)
    assert len(farlaw.predict_head(law, stats, L, [2], 8, rng)["far_mass"]) == 1


def test_far_mass_standard_error_is_the_spread_over_sampled_queries():
    """se = sd over the sampled queries / sqrt(streams), by hand; and it is the far mass's actual spread: over 60
    replicates (32 streams, 2L and 3L) the replicates' sd over the rms se is within [0.7, 1.35] (its sampling sd is
    about 1 / sqrt(2 x 59) = 0.09, so 0.3 is over 3 sd of it)."""
    family = make_family("so2-accumulated", dim=D, law="uniform", a=0.7)
    rng = np.random.default_rng(8)
    stats = farlaw.HeadStats(rng.normal(size=(50, D)), rng.normal(size=50), rng.normal(size=(50, D)))
    law = HeadLaw(family, 0.0, "test")
    far = farlaw.far_curve(law, stats, L, 2 * L, 32, rng)
    values = far.per_query_at([2, 3], L)
    np.testing.assert_allclose(far.standard_error([2, 3], L), values.std(axis=0, ddof=1) / math.sqrt(32), rtol=1e-12)
    replicates = [farlaw.far_curve(law, stats, L, 2 * L, 32, np.random.default_rng(100 + r)) for r in range(60)]
    means = np.array([f.at([2, 3], L) for f in replicates])
    rms_se = np.sqrt(np.mean(np.square([f.standard_error([2, 3], L) for f in replicates]), axis=0))
    ratio = means.std(axis=0, ddof=1) / rms_se
    assert np.all((0.7 <= ratio) & (ratio <= 1.35)), ratio


def test_far_curve_carries_each_querys_sum_across_chunks(monkeypatch):
    """F_s(N) = S_N / (1 + S_N) with S_N the running sum of the query's far exp-ratios: with chunks of 7 lags (the
    far lags of 2L to 4L cut across many), the curve is the plain cumulative sum of every chunk's ratios in order,
    and the far-score sd the sd of every chunk's scores."""
    monkeypatch.setattr(farlaw, "CHUNK", 7)
    family = make_family("so2-accumulated", dim=D, law="uniform", a=0.5)
    rng = np.random.default_rng(9)
    stats = farlaw.HeadStats(rng.normal(size=(30, D)), rng.normal(size=30), rng.normal(size=(30, D)))
    law = HeadLaw(family, 0.01, "test")
    chunks = list(farlaw.far_exp_ratios(law, stats, L, 3 * L, 5, np.random.default_rng(2)))
    assert len(chunks) > 5
    total = np.cumsum(np.concatenate([ratio for _, ratio, _ in chunks], axis=1), axis=1)
    far = farlaw.far_curve(law, stats, L, 3 * L, 5, np.random.default_rng(2))
    np.testing.assert_allclose(far.per_query, total / (1 + total), rtol=1e-12)
    scores = np.concatenate([score.ravel() for _, _, score in chunks])
    assert far.far_score_sd == pytest.approx(scores.std(), rel=1e-9)


def test_a_strided_block_is_stood_for_by_a_uniformly_drawn_lag(monkeypatch):
    """Beyond STRIDE_FROM x L each block of STRIDE far lags is scored at one lag drawn uniformly from it: over 4000
    draws of the far lags 2L..6L (STRIDE_FROM 2), the offsets within whole blocks are uniform on 0..STRIDE-1 by a
    chi-square test at the 0.1% level (the file's false-failure budget)."""
    monkeypatch.setattr(farlaw, "STRIDE_FROM", 2)
    lags = np.arange(1, 6 * L + 1)
    rng = np.random.default_rng(12)
    counts = np.zeros(farlaw.STRIDE)
    for _ in range(4000):
        rows, owner = farlaw.scored_lags(lags, L, rng)
        sparse = np.flatnonzero(lags >= 2 * L)
        whole = sparse.size // farlaw.STRIDE
        offsets = rows[L:][:whole] - sparse[::farlaw.STRIDE][:whole]
        counts += np.bincount(offsets, minlength=farlaw.STRIDE)
    assert chisquare(counts).pvalue > 1e-3, counts


def test_near_statistics_take_2l_windows_with_their_square_weights():
    """Windows of T = 2L tokens with (B, H, T, T) weights: a window of another length, or weights of another shape,
    is refused naming weights."""
    rng = np.random.default_rng(14)
    q, k, w = synthetic(make_family("nope", dim=D), 2 * L, 2, 1.0, 0.0, rng)
    assert len(farlaw.near_statistics(q, k, w, L)) == 1
    with pytest.raises(ParamError, match="weights need windows of 2 x 15 tokens"):
        farlaw.near_statistics(q, k, w, L - 1)
    with pytest.raises(ParamError, match="weights need windows"):
        farlaw.near_statistics(q, k, w[..., :-1], L)


def test_far_scores_at_lag_n_are_carried_over_n_steps():
    """RoPE's steps are one fixed rotation S, so the score at far lag n is q^T S^n k / sqrt(d) exactly (one query,
    one key, no slope, log Z^near = 0: the ratio is e^{score}); the lags run from 1, so lag L's path has L steps."""
    family = make_family("rope", dim=D, base=30.0)
    rng = np.random.default_rng(15)
    q, k = rng.normal(size=(1, D)), rng.normal(size=(1, D))
    step = np.asarray(family.sample(rng, 1, 1).dense(), dtype=np.float64)[0, 0]
    chunks = list(farlaw.far_exp_ratios(HeadLaw(family, 0.0, "rope"), farlaw.HeadStats(q, np.zeros(1), k), L, 5, 1, rng))
    first, ratio, scores = chunks[0]
    want = [float(q[0] @ np.linalg.matrix_power(step, n) @ k[0]) / math.sqrt(D) for n in range(L, L + 5)]
    assert first == 0 and len(chunks) == 1
    np.testing.assert_allclose(scores[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ratio[0], np.exp(want), rtol=1e-5)
