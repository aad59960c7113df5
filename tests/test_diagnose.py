"""The families of chapters/checks/diagnose.py, each on its own with synthetic tensors: the
family names the mistake it was built for, in the exercise's words, and says nothing of a
right answer or of a wrong one of another shape."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chapters.checks import common, diagnose

DIMS = {"batch": 2, "num_heads": 4, "L": 5, "head_dim": 3, "num_kv_heads": 2}
DIMS = diagnose.named_dims(DIMS)


def same(a, b):
    return common.close(a, b, torch.float64)


def heads(seed=0, shape=(2, 4, 5, 3)):
    """(batch, num_heads, L, head_dim) standard normal float64 values."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


# ------------------------------------------------------------------------------ dims

def test_named_dims_take_the_sizes_and_what_follows_from_them():
    dims = diagnose.named_dims({"seed": 3, "batch": (2, 3), "d_model": 16, "num_heads": 4,
                                "num_kv_heads": 2, "bias": True, "dtype": torch.float32})
    assert dims == {"batch[0]": 2, "batch[1]": 3, "d_model": 16, "num_heads": 4,
                    "num_kv_heads": 2, "head_dim": 4, "groups": 2}


def test_axes_are_named_by_the_quantity_of_their_size_in_parameter_order():
    assert diagnose.axis_names((2, 4, 5, 3), DIMS) == ["batch", "num_heads", "L", "head_dim"]
    assert diagnose.axis_names((2, 7), DIMS) == ["batch", "axis 1"]
    assert diagnose.axis_names((2, 4), DIMS, "(B, h)") == ["B", "h"]


# ------------------------------------------------------------------------------ shapes

def test_wrong_shape_names_the_axis_and_both_quantities():
    message = diagnose.wrong_shape((2, 2, 5, 3), (2, 4, 5, 3), DIMS)
    assert "the num_heads axis has 2 = batch = num_kv_heads" in message
    assert "it should have 4 = num_heads" in message


def test_wrong_shape_names_axes_in_another_order_an_extra_and_a_missing_axis():
    assert "axes are in another order" in diagnose.wrong_shape((2, 5, 4, 3), (2, 4, 5, 3), DIMS)
    assert "extra axis of size 4 = num_heads at position 1" in diagnose.wrong_shape(
        (2, 4, 5, 3), (2, 5, 3), DIMS)
    assert "lacks the num_heads axis" in diagnose.wrong_shape((2, 5, 3), (2, 4, 5, 3), DIMS)
    assert diagnose.wrong_shape((2, 4), (2, 4), DIMS) is None


# ------------------------------------------------------------------------------ layouts

def test_other_layout_names_two_swapped_axes_of_one_size():
    x = heads(shape=(2, 4, 5, 5))
    dims = diagnose.named_dims({"batch": 2, "num_heads": 4, "Lq": 5, "Lk": 5})
    message = diagnose.other_layout(x.transpose(-2, -1), x, same, dims)
    assert "the Lq axis and the Lk axis are swapped" in message


def test_other_layout_names_a_reversed_axis():
    x = heads()
    assert "the L axis runs in reverse order" in diagnose.other_layout(x.flip(2), x, same, DIMS)


def test_other_layout_names_interleaved_instead_of_tiled():
    kv = heads(shape=(2, 2, 5, 3))
    tiled = kv.repeat(1, 2, 1, 1)                  # (2, 4, 5, 3): heads k, k + 2 share
    interleaved = kv.repeat_interleave(2, dim=1)   # heads 2k, 2k + 1 share
    message = diagnose.other_layout(tiled, interleaved, same, DIMS)
    assert "interleaved instead of tiled" in message and "num_heads axis" in message


def test_other_layout_names_a_view_without_its_transpose():
    x = heads()                                         # (B, h, L, hd)
    merged = x.transpose(1, 2).reshape(2, 5, 12)        # right: (B, L, h * hd)
    viewed = x.reshape(2, 5, 12)                        # the view without the transpose
    message = diagnose.other_layout(viewed, merged, same, DIMS)
    assert "view/reshape without the transpose" in message
    assert "num_heads" in message and "L" in message


def test_other_layout_says_nothing_of_other_values():
    x = heads()
    assert diagnose.other_layout(x + 1, x, same, DIMS) is None


# ------------------------------------------------------------------------------ constants

@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["head_dim", "num_heads", "L", "d_model"]),
       st.sampled_from(["{}", "1/{}", "sqrt({})", "1/sqrt({})"]))
def test_constant_names_a_factor_by_the_quantity_it_equals(quantity, form):
    x = heads(1)
    n = DIMS[quantity]
    value = {"{}": n, "1/{}": 1 / n, "sqrt({})": math.sqrt(n),
             "1/sqrt({})": 1 / math.sqrt(n)}[form]
    message = diagnose.constant(x * value, x, same, DIMS)
    assert message.startswith("it is the right answer times")
    label = message.split(" = ", 1)[1]
    # the label names a quantity of that value (several quantities may share a size)
    assert math.isclose(diagnose.constant_names(DIMS)[label], value)


def test_constant_names_an_offset_and_nothing_else():
    x = heads(2)
    assert "plus 2 = 2" in diagnose.constant(x + 2, x, same, DIMS)
    assert diagnose.constant(x * 1.7, x, same, DIMS).endswith("times 1.7")
    assert diagnose.constant(x.flip(0), x, same, DIMS) is None


# ------------------------------------------------------------------------------ shifts

@settings(max_examples=20, deadline=None)
@given(st.integers(1, 2), st.sampled_from([1, -1]), st.integers(0, 1000))
def test_shifted_names_k_positions_along_the_axis(k, sign, seed):
    x = heads(seed, shape=(2, 4, 6, 3))
    moved = x.roll(sign * k, dims=2)
    dims = diagnose.named_dims({"batch": 2, "num_heads": 4, "L": 6, "head_dim": 3})
    message = diagnose.shifted(moved, x, same, dims)
    assert message and f"moved by {k} position" in message and "the L axis" in message


def test_mask_family_names_a_complement_and_a_diagonal_off_by_k():
    right = torch.ones(5, 5, dtype=torch.bool).tril()
    assert "complement" in diagnose.mask_family(~right, right)
    message = diagnose.mask_family(torch.ones(5, 5, dtype=torch.bool).tril(-1), right)
    assert "diagonal is off by 1" in message and "diagonal=-1 where 0 is right" in message
    as_floats = torch.ones(2, 5, 7).tril(2)
    assert "off by 2" in diagnose.mask_family(as_floats.tril(), as_floats)
    assert diagnose.mask_family(right.T, right) is None  # a triangle of the other kind


# ------------------------------------------------------------------------------ locality

def test_localized_names_one_index_or_one_block():
    wrong = torch.zeros(2, 4, 5, 3, dtype=torch.bool)
    wrong[:, 3] = True
    assert "index 3 (the last) of num_heads" in diagnose.localized(wrong, DIMS)
    wrong = torch.zeros(2, 4, 5, 3, dtype=torch.bool)
    wrong[:, :, 1:3] = True
    assert "indices 1..2 of L (a block of 2)" in diagnose.localized(wrong, DIMS)
    assert diagnose.localized(torch.ones(2, 4, dtype=torch.bool), DIMS) is None


# ------------------------------------------------------------------------------ formula steps

def _attention_formula():
    scale = lambda value, x: value / math.sqrt(x["q"].shape[-1])
    return diagnose.Formula(
        steps=(("product", lambda _, x: x["q"] @ x["k"].mT), ("scale", scale),
               ("softmax", lambda value, _: value.softmax(-1)),
               ("weighted sum", lambda value, x: value @ x["v"])),
        variants={"softmax": {"runs over the queries (dim=-2)":
                              lambda value, _: value.softmax(-2)}},
        optional=("scale", "softmax"))


def test_one_step_names_the_step_left_out_or_moved():
    q, k, v = heads(3), heads(4), heads(5)
    inputs = {"q": q, "k": k, "v": v}
    formula = _attention_formula()
    mistakes = formula.mistakes(inputs)
    unscaled = (q @ k.mT).softmax(-1) @ v
    assert diagnose.one_step(unscaled, mistakes, same) == \
        "it is what the formula gives when the scale step is left out"
    by_queries = (q @ k.mT / math.sqrt(3)).softmax(-2) @ v
    assert "softmax step runs over the queries" in diagnose.one_step(by_queries, mistakes, same)
    assert diagnose.one_step(formula.run(inputs), mistakes, same) is None


# ------------------------------------------------------------------------------ errors

def test_restate_error_names_the_sizes_of_the_message():
    message = diagnose.restate_error(
        "forward", "RuntimeError", "The size of tensor a (4) must match the size of tensor b "
        "(2) at non-singleton dimension 1", DIMS)
    assert "4 = num_heads" in message and "2 = batch = num_kv_heads" in message
    assert diagnose.restate_error("f", "KeyError", "'x'", DIMS) is None


# ------------------------------------------------------------------------------ together

@pytest.mark.parametrize("wrong, words", [
    (lambda x: x.transpose(1, 2).reshape(x.shape), "view/reshape without the transpose"),
    (lambda x: x * 2, "times 2 = 2"),
    (lambda x: x.roll(1, dims=2), "moved by 1 position"),
])
def test_explain_gives_the_fitting_family_and_family_pattern_knows_it(wrong, words):
    x = heads(6)
    actual = wrong(x)
    reason = diagnose.explain(actual, x, same, ~torch.isclose(actual, x), DIMS)
    assert words in reason
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("f(x)", reason))


def test_expect_close_names_a_family_before_the_generic_message():
    x = heads(7)
    with pytest.raises(common.CheckFailure) as failure:
        common.expect_close(x * math.sqrt(3), x, "output")
    assert "output is wrong: it is the right answer times 1.73205" in str(failure.value)


# ------------------------------------------------------------------------------ return types

def test_wrong_type_names_a_0d_tensor_where_a_float_is_documented():
    import numpy
    reason = diagnose.wrong_type(torch.tensor(0.5), float, "a Python float")
    assert "Tensor (a 0-d tensor of shape ())" in reason and ".item()" in reason
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert "is int" in diagnose.wrong_type(3, float, "a Python float")
    assert "is bool" in diagnose.wrong_type(True, int, "an int")
    assert "return statement" in diagnose.wrong_type(None, float, "a Python float")
    assert diagnose.wrong_type(0.5, float, "a Python float") is None
    assert diagnose.wrong_type(numpy.float64(0.5), float, "a Python float") is None
