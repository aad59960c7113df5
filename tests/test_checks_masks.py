"""The checks of chapter 4 (masking), tested without nbgrader.

The notebook's reference and the `solutions` package are executed into a namespace; then
every test cell of the notebook, hidden tests included, runs against it and must pass.
tests/test_catalogue.py grades the catalogue (tests/submissions/masks.py) with every
chapter's.
"""
import contextlib
import io

import pytest
import torch

import solutions
from tests.chapter import Chapter
from tests.submissions import masks as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/masks.py, as the notebook imports it


def test_notebook_has_the_expected_cells():
    assert list(CHAPTER.solutions) == ["padding_mask", "causal_mask", "masked_softmax",
                                       "scaled_dot_product_attention",
                                       "to_torch_key_padding_mask"]
    assert set(CHAPTER.tests) == {"test_padding_mask", "test_causal_mask",
                                  "test_masked_softmax", "test_scaled_dot_product_attention",
                                  "test_invariances", "test_to_torch_key_padding_mask"}


def test_notebook_reference_passes_every_check():
    assert CHAPTER.run_tests(CHAPTER.namespace()) == dict.fromkeys(CHAPTER.tests)


def test_solutions_package_passes_every_check():
    functions = {name: getattr(solutions, name) for name in CHAPTER.solutions}
    assert CHAPTER.run_tests(CHAPTER.namespace(**functions)) == dict.fromkeys(CHAPTER.tests)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_notebook_reference_equals_solutions(dtype):
    ns = CHAPTER.namespace()
    lengths = torch.tensor([5, 0, 3])
    assert torch.equal(ns["padding_mask"](lengths, 6), solutions.padding_mask(lengths, 6))
    for args in [(4,), (4, 6), (6, 4)]:
        assert torch.equal(ns["causal_mask"](*args), solutions.causal_mask(*args))
    mask = solutions.padding_mask(lengths, 6) & solutions.causal_mask(4, 6)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, n, 8, generator=gen).to(dtype) for n in (4, 6, 6))
    for m in (mask, None):
        ours, theirs = ns["scaled_dot_product_attention"](q, k, v, m), \
            solutions.scaled_dot_product_attention(q, k, v, m)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    pad = solutions.padding_mask(lengths, 6)
    for m in (pad, pad[:, 0, 0, :]):
        assert torch.equal(ns["to_torch_key_padding_mask"](m), solutions.to_torch_key_padding_mask(m))


def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 3 and len(catalogue.BUGS) >= 4


def test_checks_do_not_touch_the_global_rng():
    ns = CHAPTER.namespace()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    with contextlib.redirect_stdout(io.StringIO()):
        check.to_torch_key_padding_mask(ns["to_torch_key_padding_mask"])
        check.invariances(ns["scaled_dot_product_attention"])
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("seed", range(4))
def test_checks_pass_the_reference_on_other_seeds(seed):
    """No flaky tolerance: the reference passes on seeds and dtypes beyond the notebook's."""
    ns = CHAPTER.namespace()
    with contextlib.redirect_stdout(io.StringIO()):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            check.masked_softmax(ns["masked_softmax"], seed=seed, dtype=dtype)
            check.scaled_dot_product_attention(ns["scaled_dot_product_attention"], seed=seed,
                                               dtype=dtype)
            check.invariances(ns["scaled_dot_product_attention"], seed=seed, dtype=dtype)
        for name, cells in catalogue.CORRECT.items():
            sub = CHAPTER.namespace(cells)
            for dtype in (torch.float16, torch.bfloat16):
                check.masked_softmax(sub["masked_softmax"], seed=seed + 100, dtype=dtype)


def test_hidden_message_for_fp16_overflow_names_the_fix():
    ns = CHAPTER.namespace(catalogue.BUGS["minus_1e9_overflows_fp16"].cells)
    with pytest.raises(check.CheckFailure, match=r"torch.finfo\(scores.dtype\).min"):
        check.masked_softmax(ns["masked_softmax"], dtype=torch.float16)
