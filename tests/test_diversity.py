"""Chapter 5's claims, as tests: symmetry, divergence, specialisation, importance, pruning.

Training runs on the CPU with one thread (train's default), about 1 s each on an idle
2-core machine; the trained models are module fixtures, shared by the tests.
"""
import copy

import pytest
import torch

from solutions import MultiHeadAttention, causal_mask
from solutions.diversity import _total_loss  # the loss head_importance differentiates
from solutions.diversity import (D_MODEL, IGNORE_INDEX, SEQ_LEN, VOCAB_SIZE,
                                 TinyAttentionModel, evaluate, head_circuit_similarity,
                                 head_importance, head_param_gap, head_similarity,
                                 make_heads_identical, prune_heads, relation_scores, train,
                                 two_relation_task)

STEPS = 150  # two heads reach >= 99% by step 75-110 (measured over 6 seeds)


def make_model(num_heads, seed, **kw):
    return TinyAttentionModel(VOCAB_SIZE, SEQ_LEN, D_MODEL, num_heads, seed=seed, **kw)


@pytest.fixture(scope="module")
def eval_batch():
    return two_relation_task(1000, SEQ_LEN, VOCAB_SIZE, torch.Generator().manual_seed(123))


@pytest.fixture(scope="module")
def two_heads(eval_batch):
    model = make_model(2, seed=0)
    with torch.no_grad():
        init_weights = model(eval_batch.tokens)[2]                # (N, 2, L, L)
    history = train(model, steps=STEPS, seed=0, device="cpu")
    return model, history, init_weights


@pytest.fixture(scope="module")
def one_head():
    model = make_model(1, seed=0)
    train(model, steps=STEPS, seed=0, device="cpu")
    return model


# ----------------------------------------------------------------------------- task and model
def test_task_targets():
    tokens, prev, first = two_relation_task(5, 6, 10, torch.Generator().manual_seed(0))
    assert tokens.shape == prev.shape == first.shape == (5, 6)
    assert tokens.dtype == prev.dtype == first.dtype == torch.long
    assert ((tokens >= 0) & (tokens < 10)).all()
    assert (prev[:, 0] == IGNORE_INDEX).all()                    # no previous token at i = 0
    assert torch.equal(prev[:, 1:], tokens[:, :-1])
    assert torch.equal(first, tokens[:, :1].expand(-1, 6))


@pytest.mark.parametrize("args", [(0, 6, 10), (5, 2, 10), (5, 6, 0), (5, 6.0, 10)])
def test_task_rejects_bad_sizes(args):
    with pytest.raises(ValueError):
        two_relation_task(*args)


def test_model_shapes_and_causality():
    model = make_model(2, seed=0)
    tokens = torch.randint(VOCAB_SIZE, (3, SEQ_LEN))
    logits_prev, logits_first, weights = model(tokens)
    assert logits_prev.shape == logits_first.shape == (3, SEQ_LEN, VOCAB_SIZE)
    assert weights.shape == (3, 2, SEQ_LEN, SEQ_LEN)
    assert (weights[..., ~causal_mask(SEQ_LEN)] == 0).all()      # no attention to the future
    # a shorter sequence uses the first positions; a longer one is refused
    assert model(tokens[:, :5])[2].shape == (3, 2, 5, 5)
    with pytest.raises(ValueError, match="L <="):
        model(torch.randint(VOCAB_SIZE, (3, SEQ_LEN + 1)))
    with pytest.raises(TypeError, match="torch.long"):
        model(tokens.float())


@pytest.mark.parametrize("fn", [make_heads_identical, head_param_gap, head_circuit_similarity,
                                lambda m: prune_heads(m, [0])])
def test_head_tools_refuse_other_modules(fn):
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        fn(torch.nn.MultiheadAttention(8, 2))


def test_model_seed_is_reproducible_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = make_model(2, seed=1), make_model(2, seed=1), make_model(2, seed=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.attn.q_proj.weight, c.attn.q_proj.weight)


# ------------------------------------------------------------------------- scores on known maps
def _ideal_maps(B=2, L=6):
    """Head 0 attends to i-1 (to 0 at i = 0), head 1 to position 0: (B, 2, L, L)."""
    i = torch.arange(L)
    prev = torch.zeros(L, L)
    prev[i, (i - 1).clamp(min=0)] = 1.0
    first = torch.zeros(L, L)
    first[:, 0] = 1.0
    return torch.stack([prev, first]).expand(B, 2, L, L)


def test_relation_scores_on_known_maps():
    scores = relation_scores(_ideal_maps())
    torch.testing.assert_close(scores.prev, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(scores.first, torch.tensor([0.0, 1.0]))
    uniform = causal_mask(6).float() / torch.arange(1, 7)[:, None]  # row i: 1 / (i + 1)
    scores = relation_scores(uniform.expand(1, 1, 6, 6))
    expected = (1.0 / torch.arange(3, 7)).mean()                 # rows i = 2..5
    torch.testing.assert_close(scores.prev, expected[None])
    torch.testing.assert_close(scores.first, expected[None])
    with pytest.raises(ValueError):
        relation_scores(torch.rand(2, 6, 6))


def test_head_similarity_on_known_maps():
    maps = _ideal_maps()
    sim = head_similarity(maps)
    assert sim.shape == (2, 2)
    torch.testing.assert_close(sim.diagonal(), torch.ones(2))
    torch.testing.assert_close(sim, sim.T)
    # rows 0 and 1 coincide (a single key, and i-1 = 0); the other 4 rows are disjoint
    torch.testing.assert_close(sim[0, 1], torch.tensor(2 / 6))
    torch.testing.assert_close(head_similarity(maps[:, :, 2:])[0, 1], torch.tensor(0.0))


def test_head_circuit_similarity_is_rotation_invariant():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    make_heads_identical(mha)
    # rotate head 1's query/key subspace: W^Q R, W^K R leaves the head's scores unchanged
    R = torch.linalg.qr(torch.randn(8, 8))[0]                    # (hd, hd) orthogonal
    with torch.no_grad():
        w = mha.head_weights()
        w.query[1] = w.query[1] @ R
        w.key[1] = w.key[1] @ R
    assert head_param_gap(mha) > 0.1                             # the raw weights differ...
    qk, ov = head_circuit_similarity(mha)
    torch.testing.assert_close(qk, torch.ones(2, 2))             # ...the circuits do not
    torch.testing.assert_close(ov, torch.ones(2, 2))


# ----------------------------------------------------------------------------- pruning
@pytest.mark.parametrize("remove", [[0], [1, 3], [3, 0, 2]])
@pytest.mark.parametrize("bias", [True, False])
def test_prune_heads_equals_masking(remove, bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 4, key_size=5, value_size=7, bias=bias, head_dim=3)
    q, k, v = torch.randn(2, 4, 12), torch.randn(2, 6, 5), torch.randn(2, 6, 7)
    mask = torch.rand(2, 1, 4, 6) > 0.3
    gates = torch.ones(4)
    gates[remove] = 0.0
    expected, weights = mha(q, k, v, mask, head_mask=gates)
    small = prune_heads(mha, remove)
    assert (small.num_heads, small.head_dim, small.d_model) == (4 - len(set(remove)), 3, 12)
    out, small_weights = small(q, k, v, mask)
    assert (out - expected).abs().max() <= 1e-6
    keep = [h for h in range(4) if h not in remove]
    torch.testing.assert_close(small_weights, weights[:, keep], rtol=0, atol=1e-6)


def test_prune_heads_rejects_bad_indices():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="lie in"):
        prune_heads(mha, [2])
    with pytest.raises(ValueError, match="all"):
        prune_heads(mha, [0, 1])


# ----------------------------------------------------------------------------- symmetry
def test_make_heads_identical_makes_heads_compute_the_same():
    model = make_model(2, seed=0)
    assert head_param_gap(model.attn) > 0.1
    make_heads_identical(model.attn)
    assert head_param_gap(model.attn) == 0.0
    tokens = torch.randint(VOCAB_SIZE, (4, SEQ_LEN))
    gates = torch.ones(4, 2, requires_grad=True)
    logits_prev, logits_first, weights = model(tokens, head_mask=gates)
    assert torch.equal(weights[:, 0], weights[:, 1])
    (logits_prev.logsumexp(-1).sum() + logits_first.logsumexp(-1).sum()).backward()
    assert torch.equal(gates.grad[:, 0], gates.grad[:, 1])       # the same gradient, bit for bit
    noisy = make_heads_identical(make_model(2, seed=0).attn, noise=1e-6,
                                 generator=torch.Generator().manual_seed(0))
    assert 0 < head_param_gap(noisy) < 1e-5


def test_identical_heads_stay_identical_under_training(eval_batch):
    """Exact on this CPU for head_dim 8: each head's columns take the same GEMM code path.
    With head_dim 5 the heads straddle the 8-wide AVX2 vectors, rounding differs by
    ~1e-7, Adam amplifies it and the heads split (see the chapter): not tested here."""
    model = make_model(2, seed=0)
    make_heads_identical(model.attn)
    history = train(model, steps=100, seed=0, device="cpu",
                    track=lambda m: head_param_gap(m.attn))
    assert max(history["track"]) == 0.0
    with torch.no_grad():
        weights = model(eval_batch.tokens)[2]
    assert torch.equal(weights[:, 0], weights[:, 1])
    # two copies of one head are one head of head_dim 8: one relation stays unlearnt
    acc = evaluate(model, eval_batch)
    assert min(acc["acc_prev"], acc["acc_first"]) < 0.6


def test_nearly_identical_heads_diverge(eval_batch):
    model = make_model(2, seed=0)
    make_heads_identical(model.attn, noise=1e-6, generator=torch.Generator().manual_seed(0))
    history = train(model, steps=STEPS, seed=0, device="cpu",
                    track=lambda m: head_param_gap(m.attn))
    assert history["track"][0] < 1e-5 and history["track"][-1] > 0.5   # grew > 10^5-fold
    with torch.no_grad():
        weights = model(eval_batch.tokens)[2]
    assert head_similarity(weights[:, :, 2:])[0, 1] < 0.05
    acc = evaluate(model, eval_batch)
    assert min(acc["acc_prev"], acc["acc_first"]) > 0.95


# ----------------------------------------------------------------------------- specialisation
def test_two_heads_learn_both_relations_one_head_does_not(two_heads, one_head, eval_batch):
    model, history, _ = two_heads
    acc2 = evaluate(model, eval_batch)
    assert min(acc2["acc_prev"], acc2["acc_first"]) > 0.95
    acc1 = evaluate(one_head, eval_batch)
    assert (acc1["acc_prev"] + acc1["acc_first"]) / 2 < 0.8      # measured 0.56-0.72 (10 seeds)
    assert min(acc1["acc_prev"], acc1["acc_first"]) < 0.6
    assert len(history["loss"]) == STEPS and history["loss"][-1] < history["loss"][0] / 10


def test_trained_heads_specialise(two_heads, eval_batch):
    model, _, init_weights = two_heads
    with torch.no_grad():
        weights = model(eval_batch.tokens)[2]
    scores = relation_scores(weights)
    prev_head = int(scores.prev.argmax())
    first_head = 1 - prev_head
    assert scores.prev[prev_head] > 0.9 and scores.first[first_head] > 0.9
    assert scores.first[prev_head] < 0.1 and scores.prev[first_head] < 0.1
    # random heads start similar (both near uniform) and end disjoint
    assert head_similarity(init_weights[:, :, 2:])[0, 1] > 0.3
    assert head_similarity(weights[:, :, 2:])[0, 1] < 0.05


# ----------------------------------------------------------------------------- importance
def _with_extra_head(mha, out_scale, seed):
    """mha's heads plus one freshly initialised head whose W_O block is scaled down."""
    h, hd = mha.num_heads, mha.head_dim
    torch.manual_seed(seed)
    big = MultiHeadAttention(mha.d_model, h + 1, head_dim=hd)
    with torch.no_grad():
        for old, new in ((mha.q_proj, big.q_proj), (mha.k_proj, big.k_proj),
                         (mha.v_proj, big.v_proj)):
            new.weight[: h * hd] = old.weight
            new.bias[: h * hd] = old.bias
        big.out_proj.weight[:, : h * hd] = mha.out_proj.weight
        big.out_proj.weight[:, h * hd:] *= out_scale
        big.out_proj.bias.copy_(mha.out_proj.bias)
    return big


def test_importance_ranks_specialists_above_a_useless_head(two_heads, eval_batch):
    model, _, _ = two_heads
    imp = head_importance(model, eval_batch)
    assert imp.ablation.shape == imp.gradient.shape == (2,)
    assert (imp.ablation > 1.0).all() and (imp.gradient > 0).all()
    # removing a specialist destroys its relation and spares the other one
    with torch.no_grad():
        weights = model(eval_batch.tokens)[2]
    prev_head = int(relation_scores(weights).prev.argmax())
    gates = torch.ones(2)
    gates[prev_head] = 0.0
    lp, lf, _ = model(eval_batch.tokens, head_mask=gates)
    keep = eval_batch.prev_target != IGNORE_INDEX
    assert (lp.argmax(-1) == eval_batch.prev_target)[keep].float().mean() < 0.2
    assert (lf.argmax(-1) == eval_batch.first_target).float().mean() > 0.95

    # a third head whose output barely reaches the readouts ranks last on both scores
    original = model.attn
    model.attn = _with_extra_head(original, out_scale=0.01, seed=0)
    try:
        imp3 = head_importance(model, eval_batch)
        assert imp3.ablation[2].abs() < imp3.ablation[:2].min() / 100
        assert imp3.gradient[2] < imp3.gradient[:2].min() / 10
        # ...and pruning it changes the outputs by (almost) nothing: accuracy holds
        model.attn = prune_heads(model.attn, [2])
        acc = evaluate(model, eval_batch)
        assert min(acc["acc_prev"], acc["acc_first"]) > 0.95
    finally:
        model.attn = original
    assert model.num_heads == 2


def test_gradient_importance_matches_finite_difference(two_heads, eval_batch):
    """For one example, |dL/d gate| equals a central difference of the loss in the gate."""
    model = copy.deepcopy(two_heads[0]).double()               # float64: a clean difference
    one = tuple(t[:1] for t in eval_batch)
    imp = head_importance(model, one)
    with torch.no_grad():
        for k in range(2):
            eps = 1e-5
            up, down = torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
            up[k], down[k] = 1 + eps, 1 - eps
            fd = (_total_loss(model, one, up) - _total_loss(model, one, down)) / (2 * eps)
            torch.testing.assert_close(fd.abs(), imp.gradient[k], rtol=1e-6, atol=1e-12)


# ----------------------------------------------------------------------------- determinism
def test_training_is_deterministic():
    threads = torch.get_num_threads()
    runs = [train(m, steps=30, seed=s, device="cpu") | {"model": m}
            for m, s in ((make_model(2, 3), 7), (make_model(2, 3), 7), (make_model(2, 3), 8))]
    a, b, c = runs
    assert a["loss"] == b["loss"] and a["acc_prev"] == b["acc_prev"]
    for pa, pb in zip(a["model"].parameters(), b["model"].parameters()):
        assert torch.equal(pa, pb)
    assert a["loss"] != c["loss"]                                # another seed, other batches
    assert torch.get_num_threads() == threads                    # train restores the count


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_train_uses_cuda_by_default():
    model = make_model(2, seed=0)
    history = train(model, steps=5, seed=0)
    assert next(model.parameters()).is_cuda and len(history["loss"]) == 5


def test_run_steps_caps_every_run_with_one_environment_variable(monkeypatch):
    """The notebook's runs (200, 150, 50 steps) pass through run_steps: unset, as written;
    COURSE_DIVERSITY_STEPS caps each of them (the tests' notebook executions)."""
    from solutions.diversity_lab import run_steps
    monkeypatch.delenv("COURSE_DIVERSITY_STEPS", raising=False)
    assert [run_steps(s) for s in (200, 150, 50)] == [200, 150, 50]
    monkeypatch.setenv("COURSE_DIVERSITY_STEPS", "60")
    assert [run_steps(s) for s in (200, 150, 50)] == [60, 60, 50]
    monkeypatch.setenv("COURSE_DIVERSITY_STEPS", "ten")
    with pytest.raises(ValueError, match="COURSE_DIVERSITY_STEPS must be a positive integer"):
        run_steps(200)
