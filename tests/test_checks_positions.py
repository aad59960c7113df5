"""Chapter 7's checks (chapters/checks/positions.py), tested without nbgrader.

The notebook's reference code and the `solutions` package must pass every test cell, the
notebook's functions must equal the package's, and the checks must refuse what a single
numeric comparison could let through (a hard-coded table). tests/test_catalogue.py grades
the catalogue (tests/submissions/positions.py) with every chapter's.
"""
import pytest
import torch

import solutions.kv as kv
import solutions.positions as positions
import solutions.rotary as rotary
from tests.chapter import Chapter
from tests.submissions import positions as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)

TESTS = ["test_equivariance_gap", "test_sinusoidal_positions", "test_apply_rotary",
         "test_rotary_decoding"]
PACKAGE = {"equivariance_gap": positions.equivariance_gap,
           "sinusoidal_positions": positions.sinusoidal_positions,
           "apply_rotary": rotary.apply_rotary,
           "rotary_cached_attention": rotary.rotary_cached_attention}


@pytest.fixture(scope="module")
def reference():
    return CHAPTER.namespace()


def _run(namespace, **replaced):
    return CHAPTER.run_tests({**namespace, **replaced})


def test_notebook_has_the_expected_cells():
    assert list(catalogue._CELLS) == ["equivariance_gap", "sinusoidal", "rotary"]
    assert list(_run({}, check=None)) == TESTS


def test_reference_passes_every_test_cell(reference):
    assert _run(reference) == dict.fromkeys(TESTS)


def test_solutions_package_passes_every_test_cell(reference):
    """The package's functions in place of the notebook's, everywhere."""
    assert _run(reference, **PACKAGE) == dict.fromkeys(TESTS)


def test_notebook_functions_equal_the_package(reference):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    layer = kv.GroupedQueryAttention(24, 6, 2).double()
    caches = kv.KVCache(), kv.KVCache()
    for start, stop in ((0, 3), (3, 4), (4, 7)):       # a prompt, then one step, then three
        a = reference["rotary_cached_attention"](layer, x[:, start:stop], caches[0])
        b = rotary.rotary_cached_attention(layer, x[:, start:stop], caches[1])
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    heads = x.view(2, 7, 6, 4).transpose(1, 2)
    steps = torch.arange(5, 12)
    torch.testing.assert_close(reference["apply_rotary"](heads, steps),
                               rotary.apply_rotary(heads, steps))
    for args in ((50, 16), (3000, 8, 100.0), (1, 2)):
        ours = reference["sinusoidal_positions"](*args)
        assert ours.dtype == torch.float32
        assert torch.equal(ours, positions.sinusoidal_positions(*args))
    perm = torch.randperm(7)
    assert reference["equivariance_gap"](layer, x, perm) == \
        positions.equivariance_gap(layer, x, perm)


def test_a_hard_coded_table_fails_the_hidden_tests(reference):
    """A submission that returns the visible test's table, whatever it is asked, passes the
    visible call and fails the hidden ones (other sizes and bases)."""
    visible_table = reference["sinusoidal_positions"](200, 16)

    def hard_coded(num_positions, d_model, base=10000.0):
        return visible_table.clone()

    visible = CHAPTER.run_tests({**reference, "sinusoidal_positions": hard_coded}, hidden=False)
    hidden = _run(reference, sinusoidal_positions=hard_coded)
    assert visible["test_sinusoidal_positions"] is None, visible["test_sinusoidal_positions"]
    assert hidden["test_sinusoidal_positions"] is not None


def test_float32_angles_pass_no_test_and_are_named_at_once():
    """Angles computed in float32 (the Annotated Transformer's code as it stands) are off by
    about eps * p: the visible call, 200 positions, already names it."""
    namespace = CHAPTER.namespace({"sinusoidal": catalogue.BUGS[
        "sinusoidal_angles_in_float32"].cells["sinusoidal"]})
    message = CHAPTER.run("test_sinusoidal_positions", namespace, hidden=False)
    assert message and "float32's rounding of the angles" in message, message


def test_checks_do_not_touch_the_global_rng(reference):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _run(reference)
    assert torch.equal(torch.get_rng_state(), before)
