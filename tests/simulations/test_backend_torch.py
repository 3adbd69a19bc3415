"""The torch kernels and backend against plain fp64 numpy references (odd plane counts, q != k, nonzero
mean angles, large accumulated angles), the device="cpu" estimators against the numpy path within
standard errors, and bit for bit when both see the same angles.

Budget: each statistical test may fail a correct implementation with probability <= 1e-5 (Bonferroni over
its points), as in test_estimators.
"""

import numpy as np
import pytest
import torch

from accum.simulations import backend_torch as bt
from accum.simulations import estimators as est
from accum.simulations import laws
from accum.simulations import reference
from accum.simulations.families import make_family
from accum.simulations.params import ParamError
from accum.simulations.steps import AngleSteps

from conftest import assert_within, off_default

BUDGET = 1e-5


def angles(seed, batch=3, n=13, planes=3, mu=0.7, scale=1.0):
    """theta (batch, n, planes) with a nonzero mean: cumulative angles drift away from zero."""
    return np.random.default_rng(seed).normal(mu, scale, size=(batch, n, planes))


@pytest.mark.parametrize("planes,n", [(1, 1), (3, 13), (5, 40)])
def test_far_logits_match_dense_reference_with_carried_angle(planes, n):
    rng = np.random.default_rng(planes)
    d = 2 * planes
    q, k = rng.normal(size=d), rng.normal(size=d)   # q != k, not unit
    theta = angles(planes, n=2 * n, planes=planes, scale=2.0)
    coef_abs, coef_arg = bt.probe_coefficients(q, k)
    # two chunks with the wrapped angle carried between them == one dense product of all steps
    start = torch.zeros((3, planes), dtype=torch.float64)
    y1, start = bt.far_logits(torch.from_numpy(theta[:, :n].copy()), start, coef_abs, coef_arg)
    assert torch.all(start.abs() <= np.pi + 1e-12)
    y2, _ = bt.far_logits(torch.from_numpy(theta[:, n:].copy()), start, coef_abs, coef_arg)
    mats = AngleSteps(theta).dense()
    want = np.einsum("btd,d->bt", reference.transport(mats, np.broadcast_to(k, (3, d))), q)[:, 1:]
    np.testing.assert_allclose(torch.cat([y1, y2], dim=1).numpy(), want, atol=1e-12)


def test_bilinear_batch_probes_and_large_angles_match_reference():
    rng = np.random.default_rng(4)
    theta = angles(5, batch=4, n=17, planes=5, mu=2000.0, scale=0.3)   # |Theta| ~ 3e4 rad
    steps = AngleSteps(theta)
    q, k = rng.normal(size=(4, 10)), rng.normal(size=(4, 10))
    want = np.einsum("btd,bd->bt", reference.transport(steps.dense(), k), q)
    np.testing.assert_allclose(steps.bilinear(q, k), want, atol=1e-9)
    np.testing.assert_allclose(steps.bilinear(q[0], k[1]), np.einsum("btd,d->bt", reference.transport(steps.dense(), np.broadcast_to(k[1], (4, 10))), q[0]), atol=1e-9)


def test_value_sums_match_complex_sums():
    theta = angles(6, n=11, planes=3, mu=-0.4)
    c, s, end = (t.numpy() for t in bt.value_sums(torch.from_numpy(theta)))
    cum = np.cumsum(theta, axis=1)
    before = np.concatenate([np.zeros((3, 1, 3)), cum[:, :-1]], axis=1)
    np.testing.assert_allclose(c - 1j * s, np.exp(-1j * before).sum(axis=1), atol=1e-13)
    np.testing.assert_allclose(end, cum[:, -1], atol=1e-13)


def test_device_is_checked():
    fam = make_family("so2-accumulated", dim=4)
    for bad in ("tpu", "cpu:x", "cuda:", 3):
        with pytest.raises(ParamError, match="device must be one of cpu, cuda"):
            est.coherence(fam, 3, 8, np.random.default_rng(0), device=bad)
    if not torch.cuda.is_available():
        for absent in ("cuda", "cuda:1"):
            with pytest.raises(ParamError, match="device must be cpu here"):
                est.near_weight(fam, [4], 1.0, 8, np.random.default_rng(0), device=absent)
    for other in (make_family("so2-accumulated", dim=4, law="vonmises"), make_family("haar", dim=3)):
        with pytest.raises(ParamError, match="the torch backend draws rope and so2-accumulated"):
            est.far_residual(other, [4], 8, np.random.default_rng(0), device="cpu")


#: one case per law with a torch sampler (``laws.TORCH_LAWS``), every numeric parameter off its default
#: (``conftest.off_default``: a new law needs no entry here)
TORCH_CASES = [(name, off_default(laws.LAWS[name].PARAMS)) for name in laws.TORCH_LAWS]


def test_the_laws_without_a_torch_sampler_are_refused():
    for name in set(laws.LAWS) - set(laws.TORCH_LAWS):
        with pytest.raises(ParamError, match=rf"with law in \{{{', '.join(laws.TORCH_LAWS)}\}} only, got "
                                             rf"so2-accumulated \({name}\)"):
            bt.angle_sampler(make_family("so2-accumulated", dim=4, law=name), torch.device("cpu"), torch.Generator())


@pytest.mark.parametrize("law,params", TORCH_CASES, ids=[law for law, _ in TORCH_CASES])
def test_torch_draws_follow_the_angle_law(law, params):
    # coherence with torch-drawn angles against c(n) = sum_b |c_b| Re(phi_b^n) (unit probe: |c_b| = 2/d, arg 0),
    # phi_b = E e^{i theta_b} the law's own characteristic function (itself checked against the numpy sampler and
    # independent closed forms in tests/simulations/test_families.py, and against quadrature in
    # tests/theory/test_theory_so2.py)
    d, n = 6, 12
    fam = make_family("so2-accumulated", dim=d, law=law, **params)
    phi = fam.angle_law().characteristic(1, d)
    want = np.array([np.sum(2 / d * np.real(phi**t)) for t in range(n + 1)])
    e = est.coherence(fam, n, 4000, np.random.default_rng(1), device="cpu")
    assert_within(e.mean, e.stderr, want, BUDGET)


def test_device_cpu_agrees_with_numpy_path_within_standard_errors():
    # two independent estimates of the same quantity: z = (a - b) / sqrt(se_a^2 + se_b^2)
    fam = make_family("so2-accumulated", dim=6, mu=0.25, sigma=0.6)
    pairs = [
        (est.near_weight(fam, [10, 200], 2.0, 300, np.random.default_rng(2), chunk=64),
         est.near_weight(fam, [10, 200], 2.0, 300, np.random.default_rng(3), chunk=64, device="cpu")),
        (est.far_residual(fam, [10, 200], 300, np.random.default_rng(2), chunk=64),
         est.far_residual(fam, [10, 200], 300, np.random.default_rng(3), chunk=64, device="cpu")),
        (est.coherence(fam, 10, 500, np.random.default_rng(2)), est.coherence(fam, 10, 500, np.random.default_rng(3), device="cpu")),
    ]
    diffs = np.concatenate([np.ravel(a.mean - b.mean) for a, b in pairs])
    ses = np.concatenate([np.ravel(np.hypot(a.stderr, b.stderr)) for a, b in pairs])
    assert_within(diffs, ses, 0.0, BUDGET)


class TorchReplay:
    """A family whose sample() hands out the angles the torch backend would draw, call for call."""

    def __init__(self, family, rng):
        self.dim = family.dim
        self.draw = bt.angle_sampler(family, torch.device("cpu"), bt.torch_generator(rng, torch.device("cpu")))

    def sample(self, rng, n_steps, batch):
        return AngleSteps(self.draw(n_steps, batch).numpy())


@pytest.mark.parametrize("chunk", [7, 64])
def test_device_cpu_is_bit_identical_to_the_numpy_path_on_the_same_angles(chunk):
    fam = make_family("so2-accumulated", dim=6, mu=-0.3, sigma=0.8)
    sizes = [1, 7, 50, 130]
    for run in (lambda f, r, **kw: est.near_weight(f, sizes, 1.5, 5, r, chunk=chunk, alibi_slope=0.01, **kw),
                lambda f, r, **kw: est.far_residual(f, sizes, 5, r, chunk=chunk, **kw)):
        on_device = run(fam, np.random.default_rng(9), device="cpu")
        replayed = run(TorchReplay(fam, np.random.default_rng(9)), np.random.default_rng(0))
        assert np.array_equal(on_device.mean, replayed.mean) and np.array_equal(on_device.stderr, replayed.stderr)
    # coherence sums on the device in torch, the numpy path in numpy: same angles, equal to rounding
    q, k = np.random.default_rng(1).normal(size=(2, 6))   # q != k: nonzero plane phases
    a = est.coherence(fam, 9, 40, np.random.default_rng(9), q=q, k=k, device="cpu")
    b = est.coherence(TorchReplay(fam, np.random.default_rng(9)), 9, 40, np.random.default_rng(0), q=q, k=k)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(a.stderr, b.stderr, rtol=1e-9, atol=1e-15)


def test_gpu_bench_script_runs_on_cpu_at_small_scale(capsys):
    from accum.simulations import gpu_bench
    out = gpu_bench.run("cpu", dim=4, far=300, samples=3, chunk=64)
    assert out["far_tokens"] == 900 and 0 < out["near_weight"] < 1 and out["far_mass"] > 0
    assert all(np.isfinite(out[k]) and out[k] > 0 for k in ("draw_s", "near_weight_ratio", "far_residual_ratio"))
    assert gpu_bench.main(["--device", "cpu", "--dim", "5"]) == 2
    assert "--dim must be even" in capsys.readouterr().err


def test_interrupted_gpu_bench_says_so_and_writes_nothing(monkeypatch, capsys, tmp_path):
    """Ctrl-C (or the GPU session's time box, ``timeout -s INT``) during the benchmark: one line, exit 130, no JSON."""
    from accum.simulations import gpu_bench

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_bench, "run", interrupted)
    assert gpu_bench.main(["--device", "cpu", "--json", str(tmp_path / "b.json")]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["gpu_bench: interrupted"]
    assert list(tmp_path.iterdir()) == []
