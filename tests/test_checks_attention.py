"""Chapter 1's checks, tested without nbgrader: the reference code passes every test cell
(hidden tests included), and so does the `solutions` package; the catalogue's CORRECT and BUG
submissions are graded by tests/test_catalogue.py, with every chapter's."""
import math

import pytest
import torch
import torch.nn.functional as F

import solutions
from tests.chapter import HIDDEN_MARKER, Chapter, CheckFailure
from tests.submissions import attention as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/attention.py, as the notebook imports it


def test_notebook_has_the_expected_cells():
    assert list(CHAPTER.solutions) == ["attention_scores", "attention_entropy",
                                       "stable_softmax", "scaled_dot_product_attention"]
    assert set(CHAPTER.tests) == {"test_attention_scores", "test_attention_entropy",
                                  "test_stable_softmax", "test_stable_softmax_large",
                                  "test_sdpa", "test_sdpa_large", "test_sdpa_cross"}
    for code in CHAPTER.tests.values():
        assert HIDDEN_MARKER in code


def test_reference_passes_every_test_cell():
    assert CHAPTER.run_tests(CHAPTER.namespace()) == dict.fromkeys(CHAPTER.tests)


def test_solutions_package_passes_the_checks(capsys):
    check.attention_scores(solutions.attention_scores)
    check.attention_scores(solutions.attention_scores, seed=9, batch=(2, 3), Lq=4, Lk=7, d_k=5)
    check.attention_entropy(solutions.attention_entropy)
    check.attention_entropy(solutions.attention_entropy, seed=4, batch=(3,), Lq=2, Lk=9)
    check.stable_softmax(solutions.stable_softmax)
    check.stable_softmax(solutions.stable_softmax, seed=5, shape=(4, 6, 3, 2), dims=(-1, 0, 2),
                         dtype=torch.float64)
    check.stable_softmax_large_scores(solutions.stable_softmax)
    check.stable_softmax_large_scores(solutions.stable_softmax, seed=11, shape=(3, 4, 6), dim=1,
                                      dtype=torch.float64)
    sdpa = solutions.scaled_dot_product_attention
    check.scaled_dot_product_attention(sdpa)
    check.scaled_dot_product_attention(sdpa, seed=21, batch=(3,), L=9, d_k=6, d_v=6,
                                       dtype=torch.float64)
    check.sdpa_large_scores(sdpa)
    check.sdpa_large_scores(sdpa, seed=3, batch=(3,), Lq=4, Lk=6, d_k=4, d_v=4, magnitude=100,
                            dtype=torch.float64)
    check.cross_attention(sdpa)
    check.cross_attention(sdpa, seed=1, batch=(), dtype=torch.float64)
    check.cross_attention(sdpa, seed=8, batch=(4, 1, 2), Lq=10, Lk=2, d_k=3, d_v=8,
                          dtype=torch.float64)
    assert capsys.readouterr().out.count("\u2714") == 15


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_notebook_reference_equals_solutions_package(dtype):
    ns = CHAPTER.namespace()
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen, dtype=dtype) for n in (5, 7, 7))
    out, w = ns["scaled_dot_product_attention"](q, k, v)
    ref_out, ref_w = solutions.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out, ref_out) and torch.equal(w, ref_w)
    scores = 50 * torch.randn(4, 6, 3, generator=gen, dtype=dtype)
    for dim in (-1, 0, 1):
        assert torch.equal(ns["stable_softmax"](scores, dim=dim),
                           solutions.stable_softmax(scores, dim=dim))
    assert torch.allclose(ns["attention_scores"](q, k) @ torch.ones(7, dtype=dtype),
                          (q @ k.transpose(-2, -1) / math.sqrt(8)).sum(-1))


def test_blank_student_version_fails_everything_with_a_clear_message():
    blank = CHAPTER.blank()
    results = CHAPTER.run_tests(CHAPTER.namespace(blank))
    for test, message in results.items():
        assert message and "not implemented yet" in message, (test, message)


def test_hard_coded_output_fails_the_hidden_tests():
    """A function that returns the visible test's answer whatever its input."""
    query, key = check.random_inputs((2, 3, 4), (2, 5, 4), seed=0)
    answer = query @ key.transpose(-2, -1) / 2
    ns = CHAPTER.namespace(
        {"attention_scores": "def attention_scores(query, key):\n    return ANSWER\n"})
    ns["ANSWER"] = answer
    code = CHAPTER.tests["test_attention_scores"]
    visible, hidden = code.split(HIDDEN_MARKER)
    exec(visible, dict(ns))                       # the visible test is fooled...
    with pytest.raises(CheckFailure, match="expected shape"):
        exec(hidden, dict(ns))                    # ...the hidden ones are not


def test_forbidden_functions_are_refused_wherever_they_come_from():
    for body in ["torch.softmax(scores, dim)", "scores.softmax(dim)", "F.softmax(scores, dim)",
                 "torch.special.softmax(scores, dim)", "torch.log_softmax(scores, dim).exp()",
                 "torch.nn.Softmax(dim)(scores)"]:
        ns = {"torch": torch, "F": F}
        exec(f"def stable_softmax(scores, dim=-1):\n    return {body}\n", ns)
        with pytest.raises(CheckFailure, match="you called"):
            check.stable_softmax(ns["stable_softmax"])


def test_the_forbids_in_force_belong_to_their_context():
    """forbid_spec() blocks stack in a context variable (the grader forwards
    active_forbids() around each call of the student's code): nested blocks add their
    specs, leaving a block removes them, and another thread starts with none."""
    import threading

    from chapters.checks import operations
    outer = operations.Forbidden("a", ("test_a",), "softmax", "which normalises for you")
    inner = operations.Forbidden("b", ("test_b",), "einsum", "which contracts for you")
    seen_in_thread = []
    assert operations.active_forbids() == ()
    with operations.forbid_spec(outer):
        with operations.forbid_spec(inner):
            assert operations.active_forbids() == (outer, inner)
            thread = threading.Thread(target=lambda: seen_in_thread.append(
                operations.active_forbids()))
            thread.start()
            thread.join()
        assert operations.active_forbids() == (outer,)
    assert operations.active_forbids() == () and seen_in_thread == [()]


def test_checks_resist_rebinding_torch_functions():
    """Student code that rebinds torch.softmax cannot change what the checks expect."""
    original = torch.softmax
    try:
        torch.softmax = lambda x, dim: torch.zeros_like(x)
        ns = CHAPTER.namespace()
        with pytest.raises(CheckFailure):
            check.scaled_dot_product_attention(ns["scaled_dot_product_attention"])
    finally:
        torch.softmax = original
