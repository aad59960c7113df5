"""Chapter 6's checks (chapters/checks/kv.py), tested without nbgrader.

The notebook's reference code and the `solutions` package must pass every test cell, the
notebook's functions must equal the package's, and the checks must refuse what a single
numeric comparison could let through (a hard-coded output, a layer that is right on one
configuration only). tests/test_catalogue.py grades the catalogue (tests/submissions/kv.py)
with every chapter's.
"""
import pytest
import torch

import solutions.kv as kv
from tests.chapter import Chapter
from tests.submissions import kv as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)

TESTS = ["test_repeat_kv", "test_gqa_structure", "test_gqa_forward",
         "test_count_gqa_parameters", "test_count_kv_cache_bytes", "test_kv_cache",
         "test_cached_attention"]
PACKAGE = {"repeat_kv": kv.repeat_kv, "GroupedQueryAttention": kv.GroupedQueryAttention,
           "project_heads": kv.project_heads, "attend_heads": kv.attend_heads,
           "count_gqa_parameters": kv.count_gqa_parameters,
           "count_kv_cache_bytes": kv.count_kv_cache_bytes, "KVCache": kv.KVCache,
           "decoding_causal_mask": kv.decoding_causal_mask,
           "cached_attention": kv.cached_attention}


@pytest.fixture(scope="module")
def reference():
    return CHAPTER.namespace()


def _run(namespace, **replaced):
    return CHAPTER.run_tests({**namespace, **replaced})


def test_notebook_has_the_expected_cells():
    assert list(catalogue._CELLS) == ["repeat_kv", "GroupedQueryAttention", "counts",
                                      "decoding"]
    assert list(_run({}, check=None)) == TESTS


def test_reference_passes_every_test_cell(reference):
    assert _run(reference) == dict.fromkeys(TESTS)


def test_solutions_package_passes_every_test_cell(reference):
    """The package's functions in place of the notebook's, everywhere (the notebook's
    functions call each other by name, so each one is replaced)."""
    assert _run(reference, **PACKAGE) == dict.fromkeys(TESTS)


def test_notebook_functions_equal_the_package(reference):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    ours = reference["GroupedQueryAttention"](24, 6, 2).double()
    theirs = kv.GroupedQueryAttention(24, 6, 2).double()
    theirs.load_state_dict(ours.state_dict())
    mask = reference["causal_mask"](7)
    torch.testing.assert_close(ours(x, mask), theirs(x, mask), rtol=1e-12, atol=1e-12)
    caches = reference["KVCache"](), kv.KVCache()
    for start, stop in ((0, 3), (3, 4), (4, 7)):       # a prompt, then one step, then three
        a = reference["cached_attention"](ours, x[:, start:stop], caches[0])
        b = kv.cached_attention(theirs, x[:, start:stop], caches[1])
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for args in ((4096, 32, 8), (24, 6, 3)):
        assert reference["count_gqa_parameters"](*args) == kv.count_gqa_parameters(*args)
    assert reference["count_kv_cache_bytes"](80, 8, 128) == kv.count_kv_cache_bytes(80, 8, 128)
    for q_len, k_len in ((1, 5), (3, 3), (2, 6)):
        assert torch.equal(reference["decoding_causal_mask"](q_len, k_len),
                           kv.decoding_causal_mask(q_len, k_len))


def test_hard_coded_outputs_fail_the_hidden_tests(reference):
    """A submission that returns the visible tests' answers, whatever it is given, passes
    the visible calls and fails the hidden ones (other seeds and shapes)."""
    check = CHAPTER.check
    answers = {}
    check.repeat_kv(lambda kv_, num_heads: answers.setdefault(
        "repeat_kv", reference["repeat_kv"](kv_, num_heads)))
    check.count_kv_cache_bytes(lambda *args, **kwargs: answers.setdefault(
        (args, tuple(kwargs.items())), reference["count_kv_cache_bytes"](*args, **kwargs)))
    hard_coded = {
        "repeat_kv": lambda kv_, num_heads: answers["repeat_kv"].clone(),
        "count_kv_cache_bytes": lambda *args, **kwargs: answers.get(
            (args, tuple(kwargs.items())), 0),
    }
    visible = CHAPTER.run_tests({**reference, **hard_coded}, hidden=False)
    hidden = _run(reference, **hard_coded)
    for name in ("test_repeat_kv", "test_count_kv_cache_bytes"):
        assert visible[name] is None, visible[name]
        assert hidden[name] is not None


def _with(cell, old, new):
    """The chapter's namespace with one edit of one solution cell."""
    code = catalogue._CELLS[cell]
    assert old in code
    return CHAPTER.namespace({cell: code.replace(old, new)})


def test_forward_without_repeat_fails_although_mqa_broadcasts():
    """Without repeat_kv, multi-query attention (num_kv_heads = 1) still runs and is right,
    by broadcasting; the visible call with num_kv_heads = 2 must catch it."""
    namespace = _with("GroupedQueryAttention",
                      "k, v = repeat_kv(k, attn.num_heads), repeat_kv(v, attn.num_heads)",
                      "pass")
    CHAPTER.check.gqa_forward(namespace["GroupedQueryAttention"], num_kv_heads=1)
    message = CHAPTER.run("test_gqa_forward", namespace, hidden=False)
    assert "forward (no mask) raised ValueError: the batch dimensions" in message, message


def test_a_top_left_mask_is_named_at_the_first_step_after_the_prefill():
    """With chapter 4's top-left mask the prefill (L_new == T) is right: the decoding check
    must name the first decoding step, not the prompt (the test cell's mask check, which
    comes first, names the mask itself)."""
    namespace = _with("decoding", ".tril(T - L_new)", ".tril()")
    message = CHAPTER.run("check.cached_attention(cached_attention, KVCache)", namespace)
    assert "step 1 (position 3)" in message and "top-left corner" in message, message
    message = CHAPTER.run("test_cached_attention", namespace, hidden=False)
    assert ("decoding_causal_mask(3, 4) is wrong: it is what the formula gives when the "
            "triangle step aligns the causal mask at the top-left corner") in message, message


def test_checks_do_not_touch_the_global_rng(reference):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _run(reference)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("cell, edits, call, words", [
    ("GroupedQueryAttention",
     [("attn.q_proj(x).view(B, L, attn.num_heads, attn.head_dim).transpose(1, 2)",
       "attn.q_proj(x).view(B, attn.num_heads, L, attn.head_dim)")],
     "check.project_heads(project_heads)", "without the transpose"),
    ("GroupedQueryAttention", [("scaled_dot_product_attention(q, k, v, mask)",
                                "scaled_dot_product_attention(q, k, v)")],
     "check.attend_heads(attend_heads)", "the mask step is left out"),
    ("decoding", [(".tril(T - L_new)", ".tril()")],
     "check.decoding_causal_mask(decoding_causal_mask)", "aligns the causal mask at the top-left"),
])
def test_the_helpers_checks_name_a_mistake_in_the_helper(cell, edits, call, words):
    """project_heads, attend_heads and decoding_causal_mask have checks of their own (the
    promises of their signatures), which name a mistake made in them."""
    code = catalogue._CELLS[cell]
    for old, new in edits:
        assert old in code
        code = code.replace(old, new)
    message = CHAPTER.run(call, CHAPTER.namespace({cell: code}))
    assert message and words in message, message


def test_counts_returned_as_numpy_numbers_pass(reference):
    """An honest count computed with numpy (numpy.int64 is no Python int, but a
    numbers.Integral) gets its points, here as in the grader, whose wire turns it into one."""
    import numpy as np

    def count_gqa_parameters(*args, **kwargs):
        return np.int64(kv.count_gqa_parameters(*args, **kwargs))

    def count_kv_cache_bytes(*args, **kwargs):
        return np.int64(kv.count_kv_cache_bytes(*args, **kwargs))

    results = _run(reference, count_gqa_parameters=count_gqa_parameters,
                   count_kv_cache_bytes=count_kv_cache_bytes)
    assert results["test_count_gqa_parameters"] is None, results["test_count_gqa_parameters"]
    assert results["test_count_kv_cache_bytes"] is None, results["test_count_kv_cache_bytes"]
