"""Estimators against closed forms computed independently here, within k standard errors.

Budget: each test may fail a correct estimator with probability <= 1e-5, split (Bonferroni) over the
points it checks; the whole suite's false-failure probability stays below 1e-3.
"""

import math

import numpy as np
import pytest

from accum.simulations import estimators as est
from accum.simulations import montecarlo as mc
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.simulations.steps import AngleSteps, DenseSteps, HouseholderSteps
from accum.theory import predict

from conftest import assert_within

BUDGET = 1e-5


def estimate_of(mean, stderr):
    return mc.Estimate(np.asarray(mean), np.asarray(stderr), 0)


def within(e, predicted):
    assert_within(e.mean, e.stderr, predicted, BUDGET)


def test_householder_coherence_and_product_norm():
    fam = make_family("householder", dim=8, beta=1.0)
    n = np.arange(21)
    within(est.coherence(fam, 20, 3000, np.random.default_rng(0)), (1 - 1 / 8) ** n)
    within(est.mean_product_sq(fam, 8, 600, np.random.default_rng(1)), (1 - 1 / 8) ** (2 * np.arange(9)))


def test_gaussian_so2_coherence_onset_and_window():
    sigma = 0.6
    fam = make_family("so2-accumulated", dim=8, sigma=sigma)
    rho = np.exp(-sigma**2 / 2)
    within(est.coherence(fam, 30, 3000, np.random.default_rng(2)), rho ** np.arange(31))
    within(est.onset(fam, 0.1, 60, 3000, np.random.default_rng(3)), np.log(0.1) / np.log(rho))
    for t_len in (16, 200):
        within(est.window(fam, t_len, 600, np.random.default_rng(t_len)), (1 - rho ** (2 * t_len)) / (1 - rho**2))


@pytest.mark.parametrize("t_len", [32, 256, 2048])
def test_rope_window_is_deterministic_and_equals_theory(t_len):
    # RoPE steps are position-indexed, not random: every sample is the same path, so the unbiased c^2 is
    # exact, the jackknife error is 0 and W(T) is the closed form (which grows with T).
    fam = make_family("rope", dim=16)
    e = est.window(fam, t_len, 4, np.random.default_rng(0))
    assert e.stderr == 0.0
    assert e.mean == pytest.approx(predict("window", fam, context=t_len), rel=1e-12)


def test_haar_far_variance_is_one_over_d():
    for d in (4, 9):
        e = est.score_gap(make_family("haar", dim=d), 1, 20000, np.random.default_rng(d))
        within(e, 1.0)
        assert e.near == pytest.approx(1.0)


def test_near_weight_alibi_exact_and_streaming_invariant():
    # nope + ALiBi is deterministic: w(N) = 1 / (1 + sum_{Delta=1}^N e^{-slope Delta}), any chunk size.
    sizes, slope = [3, 50, 400], 0.3
    for chunk in (1, 7, 1000):
        e = est.near_weight(make_family("nope", dim=4), sizes, 2.0, 2, np.random.default_rng(0), alibi_slope=slope, chunk=chunk)
        want = [1 / (1 + np.sum(np.exp(-slope * np.arange(1, n + 1)))) for n in sizes]
        np.testing.assert_allclose(e.mean, want, rtol=1e-12)


def test_near_weight_haar_far_mass_and_bound():
    # Haar steps: q^T P k with P Haar is the first coordinate of a uniform unit vector, (x + 1)/2 ~ Beta((d-1)/2, (d-1)/2);
    # E far mass = N E e^{s0 (x - 1)} by quadrature; the weight obeys the norm bound 1/(1 + N e^{-2 s0}).
    from scipy import integrate, stats
    d, s0, sizes = 6, 3.0, [200, 2000]
    e = est.near_weight(make_family("haar", dim=d), sizes, s0, 200, np.random.default_rng(5), chunk=500)
    beta = stats.beta((d - 1) / 2, (d - 1) / 2)
    mgf = integrate.quad(lambda u: np.exp(s0 * (2 * u - 1)) * beta.pdf(u), 0, 1)[0]
    mass = estimate_of(e.far_mass, e.far_mass_stderr)
    within(mass, np.array(sizes) * mgf * np.exp(-s0))
    assert np.all(e.mean <= 1 / (1 + np.array(sizes) * np.exp(-2 * s0)))


def test_far_residual_exact_finite_n():
    sigma = 0.5
    rho = np.exp(-sigma**2 / 2)
    sizes = np.array([10, 100, 1000])
    want = [(n + 2 * np.sum((n - np.arange(1, n)) * rho ** np.arange(1, n))) / n**2 for n in sizes]
    fam = make_family("so2-accumulated", dim=8, sigma=sigma)
    within(est.far_residual(fam, sizes, 1500, np.random.default_rng(6), chunk=64), want)
    flat = est.far_residual(fam, sizes, 3, np.random.default_rng(6), value_rotation=False)
    np.testing.assert_allclose(flat.mean, 1.0, rtol=1e-12)


def test_far_residual_generic_path_matches_angle_fast_path():
    # the same angle steps through the dense loop and the complex cumulative-sum form
    rng = np.random.default_rng(8)
    steps = make_family("so2-accumulated", dim=6).sample(rng, 9, 4)
    u, m = rng.normal(size=(4, 6)), rng.normal(size=6)
    np.testing.assert_allclose(steps.accumulate_values(u, m), DenseSteps(steps.dense()).accumulate_values(u, m), atol=1e-12)


class Replay:
    """A family that hands out consecutive slices of one fixed pre-drawn ``Steps`` (ignores the rng).

    Streaming estimators ask for ``chunk``-sized pieces in order; the replay makes the steps they see the
    same whatever the chunk, so the streamed result must equal one plain computation on the whole draw.
    Every call must ask for the full batch (one sub-batch), and ``calls`` records the piece sizes.
    """

    def __init__(self, steps):
        self.steps, self.dim, self.used, self.calls = steps, steps.dim, 0, []

    def sample(self, rng, n_steps, batch):
        assert batch == self.steps.batch, (batch, self.steps.batch)
        assert self.used + n_steps <= self.steps.n_steps, "replay exhausted"
        lo, self.used = self.used, self.used + n_steps
        self.calls.append(n_steps)
        if isinstance(self.steps, AngleSteps):
            return AngleSteps(self.steps.theta[:, lo:self.used])
        if isinstance(self.steps, HouseholderSteps):
            return HouseholderSteps(self.steps.w[:, lo:self.used], self.steps.beta[:, lo:self.used])
        return DenseSteps(self.steps.a[:, lo:self.used])


# far sizes around every chunk boundary used below (1, 7, 64) and the end of the draw
REPLAY_SIZES = [1, 2, 6, 7, 8, 63, 64, 65, 128, 200, 401]


def replay_draw(kind):
    rng = np.random.default_rng(11)
    if kind == "haar-d5":  # odd d, generic dense path
        return make_family("haar", dim=5).sample(rng, 401, 3)
    if kind == "householder-d7":  # odd d, contractive beta, the rank-one path
        return make_family("householder", dim=7, beta=1.3).sample(rng, 401, 3)
    return make_family("so2-accumulated", dim=6, mu=0.3, sigma=0.4).sample(rng, 401, 3)  # SO(2) fast path


def check_replay_calls(fam, chunk):
    assert fam.used == max(REPLAY_SIZES) and sum(fam.calls) == fam.used and max(fam.calls) <= chunk


def near_weight_reference(steps, sizes, s0, slope):
    """Per sample: s_Delta = s0 q^T A_i ... A_{i-Delta+1} k - slope Delta, the draw's t-th step being the
    t-th step back from the query (A_{i-t+1}); w(N) = e^{s0} / (e^{s0} + sum_{Delta<=N} e^{s_Delta}),
    far mass M(N) = sum_Delta e^{s_Delta - s0}.  Returns (w, M), each (batch, len(sizes))."""
    mats = steps.dense()
    d = mats.shape[-1]
    q = k = np.full(d, 1 / np.sqrt(d))
    w, mass = [], []
    for a in mats:
        prod, far, row_w, row_m = np.eye(d), 0.0, [], []
        for delta in range(1, max(sizes) + 1):
            prod = prod @ a[delta - 1]
            far += np.exp(s0 * (q @ prod @ k) - slope * delta)
            if delta in sizes:
                row_w.append(np.exp(s0) / (np.exp(s0) + far))
                row_m.append(far / np.exp(s0))
        w.append(row_w)
        mass.append(row_m)
    return np.array(w), np.array(mass)


@pytest.mark.parametrize("kind", ["haar-d5", "so2-d6"])
@pytest.mark.parametrize("slope", [0.0, 0.02])
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_near_weight_streaming_matches_plain_loop_on_a_replayed_draw(kind, slope, chunk):
    steps, s0 = replay_draw(kind), 1.5
    w, mass = near_weight_reference(steps, REPLAY_SIZES, s0, slope)
    fam = Replay(steps)
    e = est.near_weight(fam, REPLAY_SIZES, s0, steps.batch, np.random.default_rng(0), alibi_slope=slope, chunk=chunk)
    check_replay_calls(fam, chunk)
    np.testing.assert_allclose(e.mean, w.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(e.stderr, w.std(axis=0, ddof=1) / np.sqrt(steps.batch), rtol=1e-12)
    np.testing.assert_allclose(e.far_mass, mass.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(e.log_far_mass, np.log(mass).mean(axis=0), rtol=1e-12)


def far_residual_reference(steps, sizes):
    """Per sample: r(N) = (1/N) sum_{Delta=1}^N A_N ... A_{N-Delta+1} m with A_t the draw's t-th step (the query
    at i = N follows the first N steps), m = 1/sqrt(d); returns |r(N)|^2 / |m|^2, (batch, len(sizes))."""
    mats = steps.dense()
    d = mats.shape[-1]
    m = np.full(d, 1 / np.sqrt(d))
    out = []
    for a in mats:
        row = []
        for n in sizes:
            prod, r = np.eye(d), np.zeros(d)
            for delta in range(1, n + 1):
                prod = prod @ a[n - delta]  # a[n - delta] is A_{N - Delta + 1}
                r += prod @ m
            row.append(np.sum((r / n) ** 2) / np.sum(m**2))
        out.append(row)
    return np.array(out)


@pytest.mark.parametrize("kind", ["so2-d6", "haar-d5", "householder-d7"])
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_far_residual_streaming_matches_plain_loop_on_a_replayed_draw(kind, chunk):
    steps = replay_draw(kind)
    r = far_residual_reference(steps, REPLAY_SIZES)
    fam = Replay(steps)
    e = est.far_residual(fam, REPLAY_SIZES, steps.batch, np.random.default_rng(0), chunk=chunk)
    check_replay_calls(fam, chunk)
    np.testing.assert_allclose(e.mean, r.mean(axis=0), rtol=1e-12)
    # orthogonal steps at N = 1: |A_1 m|^2 = 1 for every sample, so the true standard error is 0 and both sides
    # are rounding noise; contractive Householder steps shrink m by a random amount, so it is compared too
    first = 1 if kind != "householder-d7" else 0
    assert REPLAY_SIZES[0] == 1 and (first == 0 or e.stderr[0] < 1e-15)
    np.testing.assert_allclose(e.stderr[first:], r[:, first:].std(axis=0, ddof=1) / np.sqrt(steps.batch), rtol=1e-12)


def test_drift_fp32_exceeds_fp64():
    out = est.drift(make_family("haar", dim=8), 3000, np.random.default_rng(0))
    assert out["fp64"] < 1e-11 < 1e-7 < out["fp32"]


@pytest.mark.parametrize("call,needle", [
    (lambda f, r: est.coherence(f, 0, 10, r), "n_steps must be an integer in [1, 10000000], got 0"),
    (lambda f, r: est.coherence(f, 5, 1, r), "n_samples must be an integer in [2, 1000000000], got 1"),
    (lambda f, r: est.onset(f, 1.5, 5, 10, r), "eps must lie in (0, 1)"),
    (lambda f, r: est.near_weight(f, [10, 5], 1.0, 4, r), "far_sizes must be a non-empty increasing list"),
    (lambda f, r: est.near_weight(f, [5], -1.0, 4, r), "'s0' = -1.0 is out of range; allowed: a finite number in (0, 1e+06]"),
    (lambda f, r: est.near_weight(f, [5], 1.0, 4, r, alibi_slope=float("nan")), "alibi_slope"),
    (lambda f, r: est.far_residual(f, [], 4, r), "far_sizes must be a non-empty increasing list"),
    (lambda f, r: est.far_residual(f, np.array([], dtype=np.int64), 4, r), "far_sizes must be a non-empty"),
    (lambda f, r: est.window(f, 0, 8, r), "context must be an integer in [1, 10000000], got 0"),
    (lambda f, r: est.score_gap(f, 0, 8, r), "offset must be an integer in [1, 10000000], got 0"),
    (lambda f, r: est.near_weight(f, [5], 1.0, 4, r, chunk=0), "chunk must be an integer in [1, 10000000], got 0"),
    # found by a new-user sweep: each was silently wrong, or failed deep inside with a numpy / Python error
    (lambda f, r: est.near_weight(f, [10], 4.0, -1, r), "n_samples must be an integer in [2, 1000000000], got -1"),
    (lambda f, r: est.near_weight(f, [10], 4.0, 1, r), "n_samples must be an integer in [2, 1000000000], got 1"),
    (lambda f, r: est.far_residual(f, [10], 1, r), "n_samples must be an integer in [2, 1000000000], got 1"),
    (lambda f, r: est.near_weight(f, 10, 4.0, 4, r), "far_sizes must be a non-empty increasing list of integers in "
                                                      "[1, 1000000000], got 10"),
    (lambda f, r: est.far_residual(f, [10**10], 4, r), "far_sizes"),
    (lambda f, r: est.far_residual(f, [0, 5], 4, r), "far_sizes must be a non-empty increasing list of integers in "
                                                     "[1, 1000000000], got [0, 5]"),  # the range's lower end
    (lambda f, r: est.score_gap(f, 4, 10, r, bins=0), "bins must be an integer in [1, 1000000], got 0"),
    (lambda f, r: est.score_gap(f, 4, 10, r, bins=-1), "bins must be an integer"),
    (lambda f, r: est.near_weight(f, [10], 1e308, 4, r), "'s0' = 1e+308 is out of range"),
    (lambda f, r: est.coherence(f, 4, 10, r, q=[np.nan, 0.0, 1.0]), "q must be a finite real vector of shape (3,)"),
    (lambda f, r: est.coherence(f, 4, 10, r, k=[1.0, 0.0]), "k must be a finite real vector of shape (3,)"),
    (lambda f, r: est.far_residual(f, [10], 4, r, value_rotation=2), "value_rotation must be True or False, got 2"),
    (lambda f, r: est.coherence(f, 4, 10**15, r), "n_samples must be an integer in [2, 1000000000]"),
    (lambda f, r: est.coherence(f, 10**12, 10, r), "n_steps must be an integer in [1, 10000000]"),
    (lambda f, r: est.mean_product_sq(f, 10**12, 10, r), "n_steps must be an integer in [1, 10000000]"),
    (lambda f, r: est.drift(f, 10**12, r), "n_steps must be an integer in [1, 10000000]"),
    (lambda f, r: est.coherence(f, 4, 10, None), "rng must be a numpy Generator"),
    (lambda f, r: est.near_weight(f, [10], 4.0, 4, 42), "rng must be a numpy Generator"),
    (lambda f, r: est.coherence(None, 4, 10, r), "family must be a Family object"),
    (lambda f, r: est.score_gap("rope", 4, 10, r), "family must be a Family object"),
])
def test_bad_estimator_arguments(call, needle):
    with pytest.raises(ParamError) as err:
        call(make_family("haar", dim=3), np.random.default_rng(0))
    assert needle in str(err.value)


def test_estimates_are_reproducible_from_the_seed():
    fam = make_family("householder", dim=5)
    a = est.coherence(fam, 6, 40, np.random.default_rng(9))
    b = est.coherence(fam, 6, 40, np.random.default_rng(9))
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.stderr, b.stderr)


# --- memory: streaming over samples and steps ------------------------------------------------------------------

def peak_bytes(fn):
    """Peak traced allocation (numpy reports its buffers to tracemalloc) while fn() runs."""
    import tracemalloc
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


STREAMED = {
    # name: (call(family, n, rng) with n samples or steps) -- generic (numpy) paths, so every buffer is traced
    "coherence": lambda f, n, r: est.coherence(f, 5, n, r),
    "onset": lambda f, n, r: est.onset(f, 0.5, 5, n, r),
    "mean_product_sq": lambda f, n, r: est.mean_product_sq(f, 5, n, r),
    "score_gap": lambda f, n, r: est.score_gap(f, 3, n, r),
    "near_weight samples": lambda f, n, r: est.near_weight(f, [5, 20], 1.0, n, r, chunk=4),
    "far_residual samples": lambda f, n, r: est.far_residual(f, [5, 20], n, r, chunk=4),
    "near_weight far size": lambda f, n, r: est.near_weight(f, [n // 4], 1.0, 8, r, chunk=16),
    "far_residual far size": lambda f, n, r: est.far_residual(f, [n // 4], 8, r, chunk=16),
    "drift steps": lambda f, n, r: est.drift(f, n // 4, r),
    "score_gap offset": lambda f, n, r: est.score_gap(f, n, 4, r),
}


@pytest.mark.parametrize("name", list(STREAMED))
def test_peak_memory_does_not_grow_with_samples_or_steps(name, monkeypatch):
    # A small batch budget makes 8x the work run as 8x the batches: the peak must stay one batch's worth
    # (plus the fixed-size result), where keeping every batch would multiply it by about 8.
    monkeypatch.setattr(mc, "BATCH_BUDGET", 300)
    fam = make_family("householder", dim=3, beta=2.0)   # reflections: orthogonal, nothing underflows
    call = STREAMED[name]
    call(fam, 400, np.random.default_rng(0))  # warm-up: lazy imports (torch) are not part of the peak
    small = peak_bytes(lambda: call(fam, 400, np.random.default_rng(0)))
    large = peak_bytes(lambda: call(fam, 3200, np.random.default_rng(0)))
    assert large <= 1.25 * small + 4096, (small, large)


def test_so2_fast_paths_draw_one_batch_at_a_time(monkeypatch):
    # torch buffers are not traced, so for the SO(2) fast paths check what they ask the family for: no call
    # larger than the batch budget, however many samples or far tokens.
    monkeypatch.setattr(mc, "BATCH_BUDGET", 4096)

    class Recorder:
        def __init__(self, fam):
            self.fam, self.dim, self.sizes = fam, fam.dim, []

        def sample(self, rng, n_steps, batch):
            self.sizes.append(n_steps * batch * self.dim)
            return self.fam.sample(rng, n_steps, batch)

    fam = make_family("so2-accumulated", dim=4, mu=0.2)
    for call in (lambda f: est.coherence(f, 7, 5000, np.random.default_rng(0)),
                 lambda f: est.mean_product_sq(f, 7, 500, np.random.default_rng(0)),
                 lambda f: est.near_weight(f, [10, 3000], 1.0, 64, np.random.default_rng(0), chunk=64),
                 lambda f: est.far_residual(f, [10, 3000], 64, np.random.default_rng(0), chunk=64)):
        rec = Recorder(fam)
        call(rec)
        assert len(rec.sizes) > 4 and max(rec.sizes) <= 4 * 4096, rec.sizes[:5]


def test_drift_in_chunks_is_bit_identical_to_one_draw(monkeypatch):
    # Haar draws are sequential Gaussians, so drawing the steps in chunks sees the same matrices: same result.
    fam = make_family("haar", dim=4)
    whole = est.drift(fam, 500, np.random.default_rng(4))
    monkeypatch.setattr(mc, "BATCH_BUDGET", 7 * 16)   # 7 steps per chunk
    assert est.drift(fam, 500, np.random.default_rng(4)) == whole


def test_grouped_sums_fold_batches_exactly():
    # Running sums: one batch per group gives numpy's own sums bit for bit; many batches agree to rounding.
    rng = np.random.default_rng(2)
    data = rng.normal(size=(1000, 5))
    pos = [0]

    def draw(b):
        pos[0] += b
        return data[pos[0] - b:pos[0]]

    sums, squares, sizes = mc.grouped_sums(draw, 1000, 1)
    edges = np.cumsum([0, *sizes])
    groups = [data[a:b] for a, b in zip(edges[:-1], edges[1:])]
    assert np.array_equal(sums, [g.sum(axis=0) for g in groups])
    assert np.array_equal(squares, [(g * g).sum(axis=0) for g in groups])
    pos[0] = 0
    old = mc.BATCH_BUDGET
    try:
        mc.BATCH_BUDGET = 7
        many = mc.grouped_sums(draw, 1000, 1)
    finally:
        mc.BATCH_BUDGET = old
    np.testing.assert_allclose(many[0], sums, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(many[1], squares, rtol=1e-13)


@pytest.mark.parametrize("splits", [[1000], [1, 999], [3, 500, 7, 490], [250] * 4])
def test_moments_merge_equals_two_pass(splits):
    x = np.random.default_rng(3).normal(5.0, 1e-3, size=(1000, 3))   # large mean, small spread: no cancellation
    m = mc.Moments()
    start = 0
    for size in splits:
        m.add(x[start:start + size])
        start += size
    if len(splits) == 1:
        assert np.array_equal(m.mean, x.mean(axis=0)) and np.array_equal(m.sd(), x.std(axis=0, ddof=1))
    np.testing.assert_allclose(m.mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(m.sd(), x.std(axis=0, ddof=1), rtol=1e-9)
    np.testing.assert_allclose(m.stderr(), x.std(axis=0, ddof=1) / np.sqrt(1000), rtol=1e-9)


@pytest.mark.parametrize("sizes", [[7], [3, 1, 5, 2]])
def test_pooled_mean_is_the_plain_mean_and_standard_error(sizes):
    """Group sums and sums of squares pooled: exactly mean(x) and std(x, ddof=1) / sqrt(n), whatever the split."""
    x = np.random.default_rng(3).normal(2.0, 0.5, size=(sum(sizes), 4))
    parts = np.split(x, np.cumsum(sizes)[:-1])
    mean, se, n = mc.pooled_mean(np.array([p.sum(0) for p in parts]), np.array([(p**2).sum(0) for p in parts]),
                                  np.array(sizes))
    assert n == x.shape[0]
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-13)
    np.testing.assert_allclose(se, x.std(0, ddof=1) / np.sqrt(n), rtol=1e-10)


def test_so2_product_norm_fast_path_matches_dense_steps():
    # the same angle draws through the plane-sum fast path and the generic dense transport
    fam = make_family("so2-accumulated", dim=6, mu=0.4, sigma=0.3)

    class AsDense:
        dim = 6

        def sample(self, rng, n_steps, batch):
            return DenseSteps(fam.sample(rng, n_steps, batch).dense())

    a = est.mean_product_sq(fam, 9, 37, np.random.default_rng(5))
    b = est.mean_product_sq(AsDense(), 9, 37, np.random.default_rng(5))
    # one batch per jackknife group, handed out alternately as angles and as matrices: the mixed path adds the
    # angle groups' plane sums to the dense groups' sums as block rotations
    mixed = Alternating(fam)
    c = est.mean_product_sq(mixed, 9, 37, np.random.default_rng(5))
    assert mixed.calls == 16
    for got in (b, c):
        np.testing.assert_allclose(a.mean, got.mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a.stderr, got.stderr, rtol=1e-9, atol=1e-14)


class Alternating:
    """SO(2) steps handed out alternately as AngleSteps and as DenseSteps (a family that changes form)."""

    def __init__(self, fam):
        self.fam, self.dim, self.calls = fam, fam.dim, 0

    def sample(self, rng, n_steps, batch):
        steps = self.fam.sample(rng, n_steps, batch)
        self.calls += 1
        return steps if self.calls % 2 else DenseSteps(steps.dense())


@pytest.mark.parametrize("kind", ["haar-d5", "so2-d6", "so2-d6-alternating"])
@pytest.mark.parametrize("transposed", [False, True])
def test_bilinear_path_in_step_chunks_matches_one_draw(kind, transposed, monkeypatch):
    # Paths longer than the batch budget are drawn in chunks of BATCH_BUDGET / d steps; with batch 1 and
    # sequential (Gaussian-based) draws the chunks see the same steps as one draw, so the rows agree.
    fam = make_family("haar", dim=5) if kind == "haar-d5" else make_family("so2-accumulated", dim=6, mu=0.7, sigma=0.4)
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=fam.dim), rng.normal(size=fam.dim)       # q != k
    steps = fam.sample(np.random.default_rng(5), 101, 1)
    want = (steps.transposed() if transposed else steps).bilinear(q, k)
    monkeypatch.setattr(mc, "BATCH_BUDGET", 13 * fam.dim)          # 13 steps per chunk
    chunked = Alternating(fam) if kind.endswith("alternating") else fam
    got = est.bilinear_path(chunked, np.random.default_rng(5), 101, 1, q, k, transposed=transposed)
    np.testing.assert_allclose(got, want, atol=1e-12)
    last = est.bilinear_path(chunked if kind.startswith("haar") else fam, np.random.default_rng(5), 101, 1, q, k,
                             transposed=transposed, last_only=True)
    np.testing.assert_allclose(last[:, [0, -1]], want[:, [0, -1]], atol=1e-12)
    if kind.endswith("alternating"):   # an unknown family counts as dense (d^2 per step): 2 steps per chunk
        assert chunked.calls == int(np.ceil(101 / 2))


@pytest.mark.parametrize("call", [
    lambda f, r: est.score_gap(f, 1, 3000, r),
    lambda f, r: est.coherence(f, 2, 3000, r),
    lambda f, r: est.near_weight(f, [40], 1.0, 300, r, chunk=8),
])
def test_dense_family_draws_count_against_the_batch_budget(call, monkeypatch):
    # Haar steps are d x d matrices: a batch is sized by them, not by the (d-times smaller) path of vectors,
    # so the peak stays a small multiple of the budget (the QR of the draw needs a few copies of it).
    budget = 20_000
    monkeypatch.setattr(mc, "BATCH_BUDGET", budget)
    fam = make_family("haar", dim=12)
    call(fam, np.random.default_rng(0))
    assert peak_bytes(lambda: call(fam, np.random.default_rng(0))) <= 6 * 8 * budget


def test_onset_with_a_complex_rate_and_non_unit_probes():
    """mu != 0: c(n) = Re(C phi^n), phi = e^{i mu - sigma^2/2}, C = sum_b conj(z_qb) z_kb (z_b = x_2b + i x_2b+1), crosses
    eps at the first zero of its cosine, long before |phi|^n does; the onset, log-linear between integer steps, is
    computed here from that curve (q != k, |q| = 1.3, |k| = 0.7; eps halfway between two steps)."""
    mu, sigma = 0.3, 0.5
    fam = make_family("so2-accumulated", dim=8, mu=mu, sigma=sigma)
    rng = np.random.default_rng(5)
    q, k = rng.normal(size=8), rng.normal(size=8) * 0.2
    q, k = 1.3 * q / np.linalg.norm(q), k + q
    k = 0.7 * k / np.linalg.norm(k)
    phi = np.exp(1j * mu - sigma**2 / 2)
    c = np.sum(np.conj(q[0::2] + 1j * q[1::2]) * (k[0::2] + 1j * k[1::2]))
    mag = np.abs((c * phi ** np.arange(20)).real / c.real)
    n = int(np.flatnonzero(mag <= 0.2)[0])
    eps = np.sqrt(mag[n - 1] * mag[n])
    assert n < np.log(eps) / np.log(abs(phi)) - 5  # the shortcut through |phi| would be far off
    within(est.onset(fam, eps, 20, 20000, np.random.default_rng(6), q=q, k=k), n - 0.5)


def test_score_gap_with_non_unit_probes_is_q2_k2_for_haar():
    rng = np.random.default_rng(7)
    q, k = 1.3 * rng.normal(size=6) / np.sqrt(6), 0.7 * rng.normal(size=6) / np.sqrt(6)
    e = est.score_gap(make_family("haar", dim=6), 1, 20000, np.random.default_rng(8), q=q, k=k)
    within(e, float(q @ q) * float(k @ k))
    assert e.near == pytest.approx(float(q @ k))


def test_first_crossing_at_its_ends():
    """c(n) = 2 (1/2)^n: the level is relative to c(0), so eps = 1 is met at n = 0 and eps = 1/2 at n = 1 exactly;
    a level below the curve's range is never met (inf); a curve starting at 0 has no relative level."""
    from accum.simulations.stats import first_crossing

    curve = 2.0 * 0.5 ** np.arange(6)
    assert first_crossing(curve, 1.0) == 0.0 and first_crossing(curve, 0.5) == pytest.approx(1.0)
    assert first_crossing(curve, 0.01) == float("inf")
    with pytest.raises(ValueError, match="non-zero c\\(0\\)"):
        first_crossing(np.zeros(3), 0.5)


def test_batches_split_a_budget_of_floats():
    """Sub-batches of at most budget // per_sample samples (at least one), covering the samples in order."""
    assert list(mc.batches(10, 1, budget=4)) == [4, 4, 2]
    assert list(mc.batches(10, 3, budget=7)) == [2] * 5
    assert list(mc.batches(3, 100, budget=7)) == [1, 1, 1]


def test_controlled_mean_names_the_shapes_that_disagree():
    with pytest.raises(ValueError, match=r"known means of shape \(3,\) for controls of shape \(2,\)"):
        mc.controlled_mean(np.zeros(3), np.eye(3), 10, np.zeros(3))


def test_z_scores_by_hand():
    """(measured - predicted) / sqrt(se^2 + floor^2): with no floor by default, 0.1 / 0.05 = 2; a floor of 0.12 gives
    0.1 / 0.13."""
    from accum.simulations.stats import z_scores

    np.testing.assert_allclose(z_scores([1.1, 0.9], [1.0, 1.0], [0.05, 0.05]), [2.0, -2.0], rtol=1e-12)
    np.testing.assert_allclose(z_scores([1.1], [1.0], [0.05], floor=0.12), [0.1 / 0.13], rtol=1e-12)


def test_score_gap_in_sds_needs_a_spread_of_far_scores():
    """gap_sd = (q.k - E s) / sd(s): finite for a random family, inf for RoPE, whose far score is one number (its sd
    is rounding only)."""
    rng = np.random.default_rng(18)
    q, k = np.array([1.0, 0.5, -0.3, 0.2]), np.array([0.4, 1.0, 0.1, -0.6])
    random = est.score_gap(make_family("haar", dim=4), 3, 200, rng, q=q, k=k)
    assert math.isfinite(random.gap_sd) and random.gap_sd == pytest.approx((q @ k - random.far_mean) / math.sqrt(
        random.far_mean_stderr**2 * random.n), rel=1e-9)
    rope = est.score_gap(make_family("rope", dim=4, base=10.0), 3, 50, rng, q=q, k=k)
    assert rope.gap_sd == math.inf


@pytest.mark.parametrize("estimator", ["near_weight", "far_residual"])
def test_dependent_steps_are_one_chain_whatever_the_far_sizes_and_chunks(estimator):
    """A Markov token source is one chain along the path: splitting the far sizes ([10, 100] against [100]) or the
    chunks (7 against 4096) reads the same drawn path, so the estimate at N = 100 is the same number (the chain
    restarted at N = 10 made |r(100)|^2 1-2% high, a calibration caught it at 5 standard errors)."""
    fam = make_family("so2-accumulated", dim=6, law="token", source="markov", vocab=5, stay=0.7)
    args = (1.5,) if estimator == "near_weight" else ()

    def last(sizes, chunk):
        e = getattr(est, estimator)(fam, sizes, *args, 64, np.random.default_rng(3), chunk=chunk)
        return e.mean[-1], e.stderr[-1]

    whole = last([100], 4096)
    np.testing.assert_allclose(last([10, 100], 7), whole, rtol=1e-12)
    np.testing.assert_allclose(last([10, 100], 4096), whole, rtol=1e-12)


def test_score_gap_histogram_and_tail_count_the_far_scores():
    """RoPE's far score is one number: s = e_1^T R(omega_0) e_1 = cos(1) = 0.54 at offset 1 (omega_0 = 1), so every
    sample falls in its bin of [-1, 1] and in the tail |s| >= 1/2."""
    e1 = np.eye(4)[0]
    g = est.score_gap(make_family("rope", dim=4), 1, 50, np.random.default_rng(0), bins=20, q=e1, k=e1)
    assert g.hist_edges[0] == -1.0 and g.hist_edges[-1] == 1.0
    assert g.hist_counts.sum() == 50 and g.hist_counts[int((math.cos(1.0) + 1.0) / 0.1)] == 50
    assert g.tail_half == 1.0


def test_the_window_needs_four_paths():
    """Its jackknife runs over groups of at least one path each, four at least: three paths are refused."""
    with pytest.raises(ParamError):
        est.window(make_family("haar", dim=4), 4, 3, np.random.default_rng(0))
    assert math.isfinite(est.window(make_family("haar", dim=4), 4, 4, np.random.default_rng(0)).mean)


def test_the_jackknife_of_a_mean_is_the_standard_error_of_the_group_means():
    """For stat = total / n over G equal groups, the delete-one-group jackknife's error is exactly
    sqrt(sum_g (m_g - m)^2 / (G (G - 1))), m_g the group means (Efron & Tibshirani, "An Introduction to the
    Bootstrap", 1993, sec. 11.2): a factor (G + 1) / G or (G - 2) / G in place of (G - 1) / G moves it by 3% or more."""
    rng = np.random.default_rng(2)
    groups = rng.normal(size=(16, 5)) + np.arange(5)  # 16 groups of 5 values, sums per group
    sums, sizes = groups.sum(axis=1), np.full(16, 5)
    value, se = mc.jackknife(lambda total, n: total / n, [sums], sizes)
    means = groups.mean(axis=1)
    assert value == pytest.approx(groups.mean(), rel=1e-14)
    assert se == pytest.approx(np.sqrt(np.sum((means - means.mean()) ** 2) / (16 * 15)), rel=1e-12)


def test_memory_per_sample_is_the_documented_count():
    """The floats one sample holds, as the docstrings count them: 3 n d/2 for an SO(2) product (angles, sums,
    sines), d^2 per dense step, and a streamed chunk's min(chunk, far) steps of max(4 d, the step's storage)."""
    assert AngleSteps.product_floats(16, 10) == 240
    assert mc.stream_floats(AngleSteps, 16, 100, 1000) == 100 * 64
    assert mc.stream_floats(DenseSteps, 16, 100, 50) == 50 * 256


def test_the_alibi_slope_is_refused_outside_zero_to_a_million():
    """A negative slope would reward distance: refused, naming the parameter; 0 and 1e6 are its ends."""
    from accum.simulations.farset import near_weight

    fam = make_family("haar", dim=4)
    for slope in (-0.5, 1e6 + 1.0):
        with pytest.raises(ParamError, match="alibi_slope"):
            near_weight(fam, [4], 1.0, 8, np.random.default_rng(0), alibi_slope=slope)
    for slope in (0.0, 1e6):
        assert np.all(np.isfinite(near_weight(fam, [4], 1.0, 8, np.random.default_rng(0), alibi_slope=slope).mean))
