"""The families of chapters/checks/diagnose.py, each on its own with synthetic tensors: the
family names the mistake it was built for, in the exercise's words, and says nothing of a
right answer or of a wrong one of another shape."""
import json
import math

import pytest
import torch
import torch.nn.functional as F
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
    labels = message.split(" = ")[1:]
    # each label names a quantity of that value (several quantities may share a size)
    assert labels and all(math.isclose(diagnose.constant_names(DIMS)[label], value)
                          for label in labels)


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


# ------------------------------------------------------------------- non-finite entries

def test_nonfinite_names_the_region_that_holds_the_nan_or_the_indices():
    right = heads(8)
    wrong = right.clone()
    wrong[:, :, 2] = float("nan")                       # every entry of position 2 of L
    rows = torch.zeros(1, 1, 5, 1, dtype=torch.bool)
    rows[..., 2, :] = True
    message = diagnose.nonfinite(wrong, right, DIMS, regions={"the empty rows": rows})
    assert message.startswith("it holds NaN or inf where the right answer is finite: 24 of 120 "
                              "entries (NaN), all of them in the empty rows: every entry there")
    wrong[0, 1, 2, 0] = float("inf")
    message = diagnose.nonfinite(wrong, right, DIMS)
    assert "(NaN and inf)" in message and "index 2 of L" in message
    assert diagnose.nonfinite(right, right, DIMS) is None
    both = right.clone()
    both[0, 0, 0, 0] = float("nan")
    assert diagnose.nonfinite(both, both, DIMS) is None  # NaN where the answer is NaN too
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("f(x)", message))


# ------------------------------------------------------------------------ mask boundaries

def test_mask_runs_names_runs_off_by_k_and_their_complement():
    lengths = torch.tensor([7, 4, 0, 2])
    positions = torch.arange(7)
    right = (positions < lengths[:, None])[:, None, None, :]          # (B, 1, 1, L) prefixes
    dims = {"batch": 4, "L": 7}
    longer = (positions <= lengths[:, None])[:, None, None, :]
    message = diagnose.mask_runs(longer, right, dims, axes="(batch, 1, 1, L)")
    assert message.startswith("each run of True along the L axis is 1 position longer")
    shorter = (positions < lengths[:, None] - 2)[:, None, None, :]
    assert "2 positions shorter" in diagnose.mask_runs(shorter, right, dims)
    flipped = (positions > lengths[:, None])[:, None, None, :]        # inverted, and off by one
    message = diagnose.mask_runs(flipped, right, dims)
    assert message.startswith("it is the complement of the right mask") and "1 position" in message
    assert diagnose.mask_runs(right, right, dims) is None
    assert diagnose.mask_runs(right.flip(-1) & ~right, right, dims) is None
    assert diagnose.mask_runs(heads(9), heads(9) + 1, DIMS) is None   # not a mask
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("mask", message))


def test_masked_softmax_formula_names_two_steps_and_joins_sentences_that_coincide():
    from chapters.checks import formulas   # grader-only: the exercises' formulas
    scores = heads(10)
    mask = torch.rand(2, 1, 5, 3, generator=torch.Generator().manual_seed(1)) < 0.6
    mistakes = formulas.FORMULAS["masked softmax"]({}).mistakes({"scores": scores, "mask": mask})
    zero_filled = scores.masked_fill(~mask, 0.0).softmax(-1)           # no zeroing afterwards
    message = diagnose.one_step(zero_filled, mistakes, same)
    assert "fill step fills the masked scores with 0" in message
    assert message.endswith("and the zeroing of the masked weights step is left out")
    assert ", or " not in message
    multiplied = (scores * mask).softmax(-1).masked_fill(~mask, 0.0)
    assert "fills the masked scores with 0 (or multiplies the scores by the mask)" in \
        diagnose.one_step(multiplied, mistakes, same)
    right = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    assert diagnose.one_step(right.masked_fill(~mask, 0.0) / 2, mistakes, same) is None


# ------------------------------------------------------------------ a number beyond a dtype

def test_overflow_names_the_dtype_a_number_does_not_fit_in():
    with pytest.raises(RuntimeError) as error:
        torch.zeros(2, dtype=torch.float16).masked_fill(torch.ones(2, dtype=torch.bool), -1e9)
    message = diagnose.overflow(str(error.value))
    assert message.startswith("a number your code writes does not fit in torch.float16: its "
                              "finite values end at -65504 and 65504")
    assert diagnose.FAMILY_PATTERN.search(message)
    assert diagnose.overflow("The size of tensor a (4) must match the size of tensor b (2)") \
        is None


# ------------------------------------------------------------------- axes of size 1

def test_singleton_axes_names_axes_of_size_1_left_out_or_added():
    dims = {"batch": 4, "max_len": 7}
    message = diagnose.singleton_axes((4, 7), (4, 1, 1, 7), dims, "(B, 1, 1, max_len)")
    assert message.startswith("it lacks 2 axes of size 1, at positions 1 and 2 of (B, 1, 1, "
                              "max_len)")
    assert diagnose.singleton_axes((4, 1, 1, 7), (4, 7), dims, "(B, Lk)") == \
        "it has 2 extra axes of size 1, at positions 1 and 2; expected (B, Lk)"
    assert diagnose.singleton_axes((4, 1, 7), (4, 7), dims) is None       # wrong_shape's
    assert diagnose.singleton_axes((7, 1, 1, 4), (4, 7), dims) is None    # another order
    assert diagnose.singleton_axes((4, 2, 1, 7), (4, 7), dims) is None
    assert diagnose.FAMILY_PATTERN.search(message)


# --------------------------------------------------------------- a promised parameter

def test_missing_parameter_names_the_parameter_the_function_lacks():
    def causal_mask(q_len, k_len=None):
        return q_len
    with pytest.raises(TypeError) as error:
        causal_mask(4, device="cpu")
    message = diagnose.missing_parameter(str(error.value))
    assert message == ("your causal_mask has no parameter device, which the exercise's "
                       "signature promises: add it, and use it")
    assert diagnose.FAMILY_PATTERN.search(message)
    assert diagnose.missing_parameter("f() missing 1 required positional argument: 'x'") is None
# ------------------------------------------------------------------------------ fewer axes

def test_fewer_axes_names_an_axis_reduced_or_two_axes_merged():
    x = heads(8).softmax(-1)                                   # (batch, num_heads, L, head_dim)
    assert diagnose.fewer_axes(x.mean(1), x, same, DIMS) == \
        "it is the right answer averaged over the num_heads axis: the answer keeps that axis"
    assert "summed over the L axis" in diagnose.fewer_axes(x.sum(2), x, same, DIMS)
    assert "at the first index of the num_heads axis" in diagnose.fewer_axes(x[:, 0], x, same,
                                                                             DIMS)
    merged = diagnose.fewer_axes(x.flatten(0, 1), x, same, DIMS)
    assert "batch and num_heads merged into one axis of 8 = batch * num_heads" in merged
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("weights", merged))
    # values of that shape that are none of these, or a shape with no such relation: None
    assert diagnose.fewer_axes(heads(9)[:, 0], x, same, DIMS) is None
    assert diagnose.fewer_axes(x, x, same, DIMS) is None
    assert diagnose.fewer_axes(x[..., :2].mean(1), x, same, DIMS) is None


def test_expect_close_names_a_lost_axis_before_the_shape_message():
    x = heads(10).softmax(-1)
    with pytest.raises(common.CheckFailure) as failure:
        common.expect_close(x.mean(1), x, "weights", axes=("B", "num_heads", "L", "head_dim"))
    assert "weights is wrong: it is the right answer averaged over the num_heads axis" in \
        str(failure.value)


# ------------------------------------------------------------------------------ kinds

@pytest.mark.parametrize("what, documented, value, kinds, raised, words", [
    ("head_dim", "an int (4)", 4.0, (int,), None, "head_dim is a float (4.0) where the "
                                                   "exercise documents an int (4)"),
    ("count(8, 2)", "an int", True, (int,), None, "count(8, 2) returned a bool (True)"),
    ("f(x)", "a tensor", (1, 2), (torch.Tensor,), None, "returned a tuple of 2 items"),
    ("gap(x)", "a float", torch.tensor(0.5), (float,), None, "returned a 0-d Tensor"),
    ("m.out_proj", "an nn.Linear", None, (torch.nn.Linear,), "AttributeError",
     "m.out_proj raised AttributeError where the exercise documents an nn.Linear"),
    ("count(10, 4)", "a ValueError", 440, (), None, "returned an int (440) and raised nothing"),
    ("M(13, 4)", "a ValueError", None, (), None, "M(13, 4) raised nothing where"),
    ("M(13, 4)", "a ValueError", None, (), "AssertionError", "raised AssertionError where"),
])
def test_kind_names_what_came_instead_of_the_documented_kind(what, documented, value, kinds,
                                                             raised, words):
    reason = diagnose.kind(what, documented, value, kinds, raised)
    assert words in reason
    assert diagnose.FAMILY_PATTERN.search(reason)


def test_kind_is_silent_when_the_kind_is_the_documented_one():
    assert diagnose.kind("count(8, 2)", "an int", 1088, (int,)) is None
    assert diagnose.kind("m.bias", "None (bias=False)", None, (type(None),)) is None
    assert diagnose.kind("f(x)", "a tensor", torch.zeros(2), (torch.Tensor,)) is None
    assert diagnose.kind("M(13, 4)", "a ValueError", raised="ValueError") is None


# ------------------------------------------------------------------ zeros (chapter 5)

def test_all_zero_names_values_never_written_and_nothing_else():
    x = heads(8)
    zeros = torch.zeros_like(x)
    reason = diagnose.explain(zeros, x, same, ~torch.isclose(zeros, x), DIMS)
    assert reason.startswith("every entry is 0 where the right answer is not")
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("f(x)", reason))
    assert diagnose.all_zero(x, x) is None                  # right: nothing to name
    assert diagnose.all_zero(zeros, zeros) is None          # zeros that are right
    assert diagnose.all_zero(x * 0.5, x) is None            # wrong, but not zeros
    assert diagnose.all_zero(torch.zeros(3), x) is None     # another shape: not this family


# ------------------------------------------------------------------ in place, states

def test_changed_in_place_counts_the_entries_a_call_changed_and_nothing_else():
    before = heads(9)
    after = before.clone()
    after[:, :, 0] = 0
    reason = diagnose.changed_in_place("its input weights", before, after)
    assert reason == ("it changed its input weights in place: 24 of 120 entries differ from "
                      "what was passed in")
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("f(x)", reason))
    assert diagnose.changed_in_place("x", before, before.clone()) is None
    nan = torch.full((3,), float("nan"))
    assert diagnose.changed_in_place("x", nan, nan.clone()) is None   # NaN stays NaN
    assert diagnose.changed_in_place("x", before, before[0]) is None  # another shape


def test_wrong_state_names_the_state_found_and_the_one_expected():
    reason = diagnose.wrong_state("mode", "training", "eval", " (mha's mode)")
    assert reason == "its mode is training where it should be eval (mha's mode)"
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("f(x)", reason))
    assert diagnose.wrong_state("mode", "eval", "eval") is None
# ------------------------------------------------------------------------------ states

def test_state_dependent_names_the_starting_states_right_and_wrong():
    outcomes = {"a model in training mode": (False, "it left the model in eval mode"),
                "a model in eval mode": (True, "")}
    reason = diagnose.state_dependent(outcomes)
    assert reason == ("it is right from a model in eval mode but not from a model in training "
                      "mode: it left the model in eval mode")
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("generate(model)", reason))
    # right from every state, or wrong from every state: nothing depends on the state
    assert diagnose.state_dependent({"an empty cache": (True, ""),
                                     "a filled cache": (True, "")}) is None
    assert diagnose.state_dependent({"an empty cache": (False, "wrong"),
                                     "a filled cache": (False, "wrong")}) is None


def test_every_familys_sentence_is_recognised_by_words_of_its_own():
    """FAMILY_PATTERN (what counts as a family's sentence when the families alone are
    measured) reads each template's longest fixed text: long enough not to match a check's
    ordinary message ("its " would match most of them)."""
    for key in diagnose.FAMILY_KEYS:
        assert len(diagnose._signature(key).strip()) >= 12, key
    assert not diagnose.FAMILY_PATTERN.search(
        "output is wrong (largest error 0.5). Its shape is right; compare its steps.")
# ------------------------------------------------- chapters 1 and 2 (helper ch12's additions)

def _raise_in_a_cell(source, filename, function, *args):
    """Run `function` (defined by `source`, compiled as a notebook cell named `filename`,
    its lines registered as the kit and the grader register them) on args: attempt()'s
    error."""
    import linecache

    from chapters.checks import operations
    namespace = {"torch": torch}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return operations.attempt(namespace[function], *args)[1]


def test_student_line_quotes_the_line_of_the_cell_not_torch_internals():
    source = ("def merge(x):\n"
              "    y = x.transpose(1, 2)\n"
              "    return y.view(y.shape[0], y.shape[1], -1)\n")
    error = _raise_in_a_cell(source, "cell merge_heads, line 1", "merge", heads())
    kind, message, shapes, where, line = error
    assert kind == "RuntimeError" and shapes == "(2, 4, 5, 3)"
    assert json.loads(line)["names"] == [["y", [2, 5, 4, 3]]]   # the line's tensor, as it is
    # the innermost frame of the student's cell, not torch's, named as the grader names it
    assert where == "line 3 of cell merge_heads: return y.view(y.shape[0], y.shape[1], -1)"
    text = diagnose.restate_error("merge_heads", kind, message, DIMS, shapes, where=where)
    assert "(at line 3 of cell merge_heads: return y.view" in text
    assert diagnose.FAMILY_PATTERN.search(text)
    # Jupyter's generated file names read as "your cell"; no traceback: no line, no claim
    error = _raise_in_a_cell("def f(x):\n    return x @ x\n", "<ipython-input-3-ab>", "f",
                             heads())
    assert error[3] == "line 2 of your cell: return x @ x"
    assert diagnose.restate_error("f", "TypeError", "no sizes", DIMS, "", where="") is None
    assert diagnose.located("") == ""


def test_student_line_reads_the_traceback_the_students_process_sent():
    from chapters.checks import operations
    error = RuntimeError("shape '[2, -1, 3, 3]' is invalid for input of size 100")
    error.student_traceback = (
        '  File "cell split_heads, line 3", line 6, in split_heads\n'
        '    x = x.view(B, L, num_heads, -1)\n'
        f'  File "{torch.__file__}", line 9, in view\n')
    assert operations.student_line(error) == (
        "line 6 of cell split_heads: x = x.view(B, L, num_heads, -1)")


def test_item_order_names_items_returned_in_another_order():
    out, weights = (2, 6, 4), (2, 6, 6)
    reason = diagnose.item_order([weights, out], [out, weights], ["output", "weights"])
    assert "you returned (weights, output)" in reason and "(output, weights)" in reason
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.item_order([out, weights], [out, weights], ["output", "weights"]) is None
    # items of one shape cannot be told apart: no claim
    assert diagnose.item_order([out, out], [out, out], ["a", "b"]) is None
    assert diagnose.item_order([(2, 6, 5), out], [out, weights], ["output", "weights"]) is None


def test_wrong_shape_names_an_axis_left_split_in_two():
    dims = diagnose.named_dims({"B": 2, "L": 5, "num_heads": 3, "head_dim": 4})
    reason = diagnose.wrong_shape((2, 3, 5, 4), (2, 5, 12), dims)
    assert reason.startswith("the d_model axis (12) is still split into two axes, "
                             "num_heads x head_dim: you gave (B, num_heads, L, head_dim)")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.split_axis((2, 5, 3, 4), (2, 5, 12), dims).endswith("(B, L, d_model)")
    # one more axis whose sizes multiply to none of the expected ones: not this family
    assert diagnose.split_axis((2, 5, 3, 5), (2, 5, 12), dims) is None
    assert diagnose.split_axis((2, 5, 12), (2, 5, 12), dims) is None


def test_chapter_1_and_2_formulas_give_the_right_answer_and_their_variants():
    """Each formula of chapters 1 and 2 (checks/formulas.py), with no step replaced, is the
    exercise's answer as PyTorch computes it; and a variant's output is what one_step names."""
    import torch.nn.functional as F

    from chapters.checks import formulas
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 5, 12, generator=gen, dtype=torch.float64) for _ in range(3))
    dims = diagnose.named_dims({"B": 2, "L": 5, "num_heads": 3, "head_dim": 4})
    scores = formulas.FORMULAS["attention scores"](dims, d_k=12)
    assert torch.allclose(scores.run({"query": q, "key": k}), q @ k.mT / math.sqrt(12))
    softmax = formulas.FORMULAS["stable softmax"](dims, dim=-2)
    assert torch.allclose(softmax.run({"scores": q}), torch.softmax(q, dim=-2))
    found = softmax.mistakes({"scores": q})
    assert diagnose.one_step(torch.softmax(q, dim=-1), found, same).endswith(
        "the reduction axis step is the last axis instead of dim=-2 (in the max and the sum)")
    weights = torch.softmax(q, dim=-1)
    entropy = formulas.FORMULAS["attention entropy"](dims)
    assert torch.allclose(entropy.run({"weights": weights}),
                          -(weights * weights.log()).sum(dim=-1))
    split = formulas.FORMULAS["split heads"](dims, num_heads=3)
    assert torch.equal(split.run({"x": q}), q.view(2, 5, 3, 4).transpose(1, 2))
    weight, bias = torch.randn(12, 7, generator=gen), torch.randn(12, generator=gen)
    x = torch.randn(2, 5, 7, generator=gen)
    projection = formulas.FORMULAS["head projection"](dims, i=1, num_heads=3)
    assert torch.allclose(projection.run({"x": x, "weight": weight, "bias": bias}),
                          F.linear(x, weight, bias)[..., 4:8])
    # the core: identity projections, so the formula is attention per head
    eye = torch.eye(12, dtype=torch.float64)
    core = formulas.FORMULAS["multi-head attention core"](dims, num_heads=3)
    inputs = {"query": q, "key": k, "value": v, "mask": None,
              **{f"{n}_w": eye for n in "qkvo"}}
    heads = [t.view(2, 5, 3, 4).transpose(1, 2) for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(2, 5, 12)
    assert torch.allclose(core.run(inputs), expected)
    keys_from_query = F.scaled_dot_product_attention(heads[0], heads[0], heads[2])
    assert diagnose.one_step(keys_from_query.transpose(1, 2).reshape(2, 5, 12),
                             core.mistakes(inputs), same).endswith(
        "the inputs step reads the query input for the keys")
    # the chapter's silent bug: the head axis left after L, attention across the heads
    across = F.scaled_dot_product_attention(*(t.view(2, 5, 3, 4) for t in (q, k, v)))
    assert "the attention runs across the heads of each position" in diagnose.one_step(
        across.reshape(2, 5, 12), core.mistakes(inputs), same)
    # never split: one head of all 12 features, scaled by sqrt(12)
    one_head = F.scaled_dot_product_attention(q, k, v)
    assert "the inputs are never split into heads" in diagnose.one_step(
        one_head, core.mistakes(inputs), same)


def test_chapter_7_formulas_name_the_gap_on_the_input_or_one_example_and_the_exponent():
    """The equivariance gap compared with the permuted input, or over the first example only;
    the sinusoidal table whose exponent is not divided by d_model (checks/formulas.py)."""
    from chapters.checks import formulas
    gen = torch.Generator().manual_seed(7)
    x, output, permuted = (torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
                           for _ in range(3))
    perm = torch.tensor([1, 2, 3, 4, 5, 0])
    gap = formulas.FORMULAS["equivariance gap"]({})
    inputs = {"x": x, "output": output, "permuted": permuted, "perm": perm}
    assert torch.allclose(gap.run(inputs), (permuted - output[:, perm]).abs().max().reshape(1))
    found = gap.mistakes(inputs)
    on_input = (permuted - x[:, perm]).abs().max().reshape(1)
    assert "compares with the permuted input x[:, perm]" in diagnose.one_step(on_input, found,
                                                                              same)
    first = (permuted - output[:, perm])[0].abs().max().reshape(1)
    assert "the first example of the batch only" in diagnose.one_step(first, found, same)
    table = formulas.FORMULAS["sinusoidal table"]({}, d_model=8)
    positions = torch.arange(10)
    angles = positions.double()[:, None] * 10000.0 ** (-2 * torch.arange(4.0, dtype=torch.float64))
    unscaled = torch.stack([angles.sin(), angles.cos()], -1).reshape(10, 8)
    assert "the exponent 2i is not divided by d_model" in diagnose.one_step(
        unscaled, table.mistakes({"positions": positions}), same)
# ------------------------------------------------------------------------------ return types

def test_kind_names_a_0d_tensor_or_nothing_where_a_number_is_documented():
    import numpy
    reason = diagnose.kind("gap(x)", "a Python float", torch.tensor(0.5), kinds=(float,))
    assert "returned a 0-d Tensor where the exercise documents a Python float" in reason
    assert ".item()" in reason and diagnose.FAMILY_PATTERN.search(reason)
    assert "returned an int (3)" in diagnose.kind("gap(x)", "a Python float", 3, kinds=(float,))
    assert "returned a bool (True)" in diagnose.kind("n(x)", "an int", True, kinds=(int,))
    assert "return statement" in diagnose.kind("gap(x)", "a Python float", None,
                                               kinds=(float,))
    assert diagnose.kind("gap(x)", "a Python float", 0.5, kinds=(float,)) is None
    assert diagnose.kind("gap(x)", "a Python float", numpy.float64(0.5), kinds=(float,)) is None


# ------------------------------------------------------------------ what an error means

def _error_of(operation):
    with pytest.raises(Exception) as error:
        operation()
    return str(error.value)


def test_error_reason_names_the_operation_and_its_sizes():
    dims = diagnose.named_dims({"batch": 2, "Lq": 6, "Lk": 5, "d_k": 4, "d_v": 8})
    a, b, w = torch.randn(2, 6, 4), torch.randn(2, 5, 4), torch.randn(8, 4)
    product = diagnose.error_reason(_error_of(lambda: a @ b), dims)
    assert "pairs the last axis of A with the second-to-last axis of B" in product
    assert "4 = d_k against 5 = Lk" in product
    linear = diagnose.error_reason(_error_of(lambda: a @ w), dims)
    assert "12 = batch * Lq rows" in linear and "B is in the other orientation" in linear
    broadcast = diagnose.error_reason(_error_of(lambda: a / a.sum(dim=-1)), dims,
                                      code="return a / a.sum(dim=-1)")
    assert "4 = d_k entries and one of 6 = Lq entries" in broadcast
    assert "(.sum(dim=-1)) drops the axis" in broadcast and "keepdim=True" in broadcast
    assert "keepdim" not in diagnose.error_reason(
        _error_of(lambda: a / a.sum(dim=-1)), dims, code="return a / s")
    view = diagnose.error_reason(_error_of(lambda: a.view(2, 6, 3, 2)), dims)
    assert "needs 72 entries but the tensor holds 48" in view
    assert "axis 3 of a tensor that has only 3 axes" in diagnose.error_reason(
        _error_of(lambda: a.transpose(1, 3)), dims)
    assert "different dtypes" in diagnose.error_reason(
        _error_of(lambda: a.double() @ b.transpose(1, 2)), dims)
    assert "a None is used as a tensor" in diagnose.error_reason(_error_of(lambda: a * None),
                                                                 dims)
    assert diagnose.error_reason("'x'", dims) is None
    # after PyTorch's own words, which stay as they were; a family's sentence
    text = diagnose.restate_error("f", "RuntimeError", _error_of(lambda: a @ b), dims,
                                  "(2, 6, 4)", where="line 2 of cell f: return a @ b")
    assert text.startswith("f raised RuntimeError: Expected size for first two dimensions")
    assert "What that error means: a matrix product" in text
    assert diagnose.FAMILY_PATTERN.search(text.split("(at line")[0] + "What that error means: ")


# ------------------------------------------------------------ an offset along one axis

def test_offset_along_names_a_vector_added_along_one_axis():
    expected = heads(1)
    bias = torch.arange(3, dtype=torch.float64) + 1.0                    # (head_dim,)
    reason = diagnose.offset_along(expected + 2 * bias, expected, same, DIMS)
    assert "plus an offset that varies only along the head_dim axis" in reason
    assert "(2 times the vector b)" in diagnose.offset_along(expected + 2 * bias, expected,
                                                             same, DIMS, vectors={"b": bias})
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.offset_along(expected + 1.5, expected, same, DIMS) is None   # constant's
    assert diagnose.offset_along(expected + heads(2), expected, same, DIMS) is None
    assert diagnose.offset_along(expected, expected, same, DIMS) is None


# ------------------------------------------------------------------ two steps at once

def test_formula_tries_two_changes_at_once_said_in_step_order():
    formula = diagnose.Formula([("double", lambda _v, x: 2 * x["t"]),
                                ("shift", lambda v, _x: v + 1),
                                ("square", lambda v, _x: v * v)],
                               {"shift": {"subtracts 1": lambda v, _x: v - 1}},
                               ["square"])
    inputs = {"t": torch.arange(4, dtype=torch.float64)}
    mistakes = formula.mistakes(inputs)
    wrong = 2 * inputs["t"] - 1                       # subtracts, and no square
    assert diagnose.one_step(wrong, mistakes, same) == (
        "it is what the formula gives when the shift step subtracts 1, and the square step "
        "is left out")
    # a pair that gives a single change's numbers is that change, not listed again
    assert all(", and " not in s for s, v in mistakes.items()
               if torch.equal(v, formula.run(inputs, {"square": lambda v, _x: v})))
    assert len(formula.pairs()) <= formula.MOST_PAIRS
    alone = diagnose.Formula(formula.steps, formula.variants, formula.optional, pairs=False)
    assert all(", and " not in sentence for sentence in alone.mistakes(inputs))


# ------------------------------------------------------- the right values, another shape

def test_permuted_names_the_right_values_in_another_shape():
    expected = heads(3)                                   # (batch, num_heads, L, head_dim)
    reason = diagnose.permuted(expected.transpose(1, 2), expected, same, DIMS)
    assert "you gave (batch, L, num_heads, head_dim), the answer is (batch, num_heads, L, " \
           "head_dim)" in reason and diagnose.FAMILY_PATTERN.search(reason)
    view = diagnose.permuted(expected.transpose(1, 2).reshape(2, 5, 12), expected, same, DIMS)
    assert "read in the axis order (batch, L, num_heads, head_dim)" in view
    assert "view/reshape without the transpose" in view
    assert diagnose.permuted(heads(4).transpose(1, 2), expected, same, DIMS) is None
    assert diagnose.permuted(expected, expected, same, DIMS) is None


def test_reduced_many_names_the_axes_averaged_or_summed_away():
    expected = heads(5)
    reason = diagnose.reduced_many(expected.mean(dim=(0, 2)), expected, same, DIMS)
    assert reason == ("it is the right answer averaged over the batch axis and the L axis: "
                      "the answer keeps those axes")
    assert "summed over the batch axis and the num_heads axis and the L axis and the " \
           "head_dim axis" in diagnose.reduced_many(expected.sum(), expected, same, DIMS)
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.reduced_many(expected.mean(dim=0), expected, same, DIMS) is None
    assert diagnose.reduced_many(heads(6).mean(dim=(0, 2)), expected, same, DIMS) is None


def test_other_layout_names_entries_read_in_another_order_of_three_axes():
    weight = heads(7, shape=(12, 7))                      # (num_heads * head_dim, in)
    dims = {"num_heads": 3, "head_dim": 4, "in_features": 7}
    scrambled = weight.view(3, 4, 7).permute(1, 2, 0).reshape(12, 7)
    reason = diagnose.other_layout(scrambled, weight, same, dims)
    assert "read in the axis order (head_dim, in_features, num_heads)" in reason
    assert diagnose.other_layout(heads(8, shape=(12, 7)), weight, same, dims) is None


# ------------------------------------------------- lines rescaled, indices reordered

def test_rescaled_lines_names_lines_each_times_its_own_factor():
    expected = torch.softmax(heads(9), dim=-1)             # (batch, num_heads, L, head_dim)
    unnormalised = expected * torch.arange(1.0, 41.0, dtype=torch.float64).reshape(2, 4, 5, 1)
    reason = diagnose.rescaled_lines(unnormalised, expected, same, DIMS)
    assert reason.startswith("each line of entries along the head_dim axis is the right one "
                             "times its own factor (from 1 to 40")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.rescaled_lines(3 * expected, expected, same, DIMS) is None  # constant()'s
    assert diagnose.rescaled_lines(heads(10), expected, same, DIMS) is None
    assert diagnose.rescaled_lines(expected, expected, same, DIMS) is None


def test_indices_permuted_names_which_index_holds_which():
    expected = heads(11)                                   # (batch, num_heads, L, head_dim)
    order = [2, 0, 1, 3]
    reason = diagnose.indices_permuted(expected[:, order], expected, same, DIMS)
    assert reason == ("the values are right but the indices of the num_heads axis are in "
                      "another order: index 0 holds what belongs at 2, index 1 holds what "
                      "belongs at 0, index 2 holds what belongs at 1 (the blocks or items of "
                      "the num_heads axis put back in the wrong order)")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.indices_permuted(expected, expected, same, DIMS) is None
    assert diagnose.indices_permuted(heads(12), expected, same, DIMS) is None
    # an index that appears twice (one head copied over another) is no reordering
    assert diagnose.indices_permuted(expected[:, [0, 0, 2, 3]], expected, same, DIMS) is None


def test_reshaped_in_place_names_the_new_shape_in_the_exercises_words():
    before = heads(13)                                     # (batch, num_heads, L, head_dim)
    reason = diagnose.reshaped_in_place("its input x", before, before.transpose(1, 2), DIMS)
    assert reason.startswith("it changed its input x in place, to another shape: (2, 5, 4, 3) "
                             "where it was (2, 4, 5, 3) (the sizes are right but the axes are "
                             "in another order: you gave (batch, L, num_heads, head_dim)")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.reshaped_in_place("x", before, before.clone(), DIMS) is None
    assert diagnose.reshaped_in_place("x", before, None, DIMS) is None


def test_unrepeatable_names_two_calls_that_disagree():
    first = heads(14)
    dropped = first * (heads(15) > 0)                      # a dropout's zeros
    reason = diagnose.unrepeatable("outputs", first, dropped, same)
    assert reason.startswith("the same call on the same inputs gave other outputs the second "
                             "time: a random step")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.unrepeatable("outputs", first, first.clone(), same) is None
    assert diagnose.unrepeatable("outputs", first, None, same) is None


def test_error_reason_says_which_name_on_the_students_line_is_none():
    reason = diagnose.error_reason("'NoneType' object has no attribute 'chunk'", DIMS,
                                   "w_q, w_k, w_v = torch_mha.in_proj_weight.chunk(3)")
    assert reason.endswith("; on that line, `torch_mha.in_proj_weight` is None")
    reason = diagnose.error_reason("'NoneType' object is not subscriptable", DIMS,
                                   "return x @ weight[rows].T + bias[rows]")
    assert reason.endswith("; on that line, one of `weight`, `bias` is None")
    assert diagnose.error_reason("'NoneType' object is not subscriptable", DIMS, "") == \
        diagnose.MESSAGES["error_none"]
# ------------------------------------------------------- triangles, two errors (chapter 4)

def test_triangle_kind_names_an_upper_triangle_where_a_lower_one_is_right():
    dims = {"q_len": 4, "k_len": 7}
    lower = torch.ones(4, 7, dtype=torch.bool).tril()
    reason = diagnose.triangle_kind(torch.ones(4, 7, dtype=torch.bool).triu(), lower, dims)
    assert reason.startswith("it is an upper triangle where a lower one is right: your mask "
                             "is True where j >= i, the answer where j <= i (j the k_len "
                             "index, i the q_len index")
    assert diagnose.FAMILY_PATTERN.search(reason)
    shifted_lower = diagnose.triangle_kind(lower, torch.ones(4, 7, dtype=torch.bool).triu(2),
                                           dims)
    assert "lower triangle where an upper one" in shifted_lower and "j >= i + 2" in shifted_lower
    # the same kind (a diagonal off by k: mask_family's), or no triangle: not this family
    assert diagnose.triangle_kind(lower.tril(-1), lower, dims) is None
    # (the complement is one too, said by mask_family first in explain())
    assert "j >= i + 1" in diagnose.triangle_kind(~lower, lower, dims)
    assert diagnose.triangle_kind(torch.eye(4, 7).bool(), lower, dims) is None
    assert diagnose.triangle_kind(torch.ones(4, 7, dtype=torch.bool), lower, dims) is None
    assert diagnose.triangle_kind(heads(1), heads(1), DIMS) is None


def test_more_error_reasons_name_an_index_of_too_many_axes_and_bool_arithmetic():
    assert "more axes than the tensor has (2)" in diagnose.error_reason(
        "too many indices for tensor of dimension 2", DIMS)
    message = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
               "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    assert "~mask" in diagnose.error_reason(message, DIMS)
    assert "~mask" in diagnose.error_reason(message.replace("Subtraction", "Negation")
                                            .replace("with a bool", "on a bool"), DIMS)
    assert diagnose.more_error_reasons("something else") is None


def test_factors_of_an_axis_are_named_by_quantities_that_are_no_other_axis():
    dims = diagnose.named_dims({"batch": 2, "num_kv_heads": 2, "num_heads": 6, "L": 5,
                                "head_dim": 3})
    kv = heads(2, shape=(2, 2, 5, 3))                     # (batch, num_kv_heads, L, head_dim)
    reason = diagnose.other_layout(kv.repeat(1, 3, 1, 1), kv.repeat_interleave(3, dim=1),
                                   same, dims)
    assert "entries of the num_heads axis are in the other order" in reason
    assert "num_kv_heads" in reason and "groups" in reason
    assert "batch" not in reason and "head_dim" not in reason
    # the tiled copy holds groups blocks of num_kv_heads heads, the answer the reverse
    assert "(groups blocks of num_kv_heads where num_kv_heads blocks of groups are expected" \
        in reason


def test_one_minus_names_a_distance_returned_for_a_similarity():
    similarity = heads(9).sigmoid()
    reason = diagnose.one_minus(1 - similarity, similarity, same)
    assert reason.startswith("it is 1 minus the right answer")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert diagnose.one_minus(similarity, similarity, same) is None
    assert diagnose.one_minus(2 - similarity, similarity, same) is None
    assert diagnose.one_minus(torch.zeros(3), torch.ones(3), same) is None   # constant's


def test_constant_names_a_count_off_by_one():
    x = heads(10)
    reason = diagnose.constant(x * 4 / 5, x, same, {"L": 7})
    assert reason.startswith("it is the right answer times 0.8 = 4/5: as if a sum were "
                             "divided by 5 where it should be divided by 4")
    assert diagnose.FAMILY_PATTERN.search(reason)
    assert "= 6/5:" in diagnose.constant(x * 6 / 5, x, same, {"L": 7})
    assert diagnose.constant(x * 1.7, x, same, {"L": 7}).endswith("times 1.7")
    assert "as if" not in diagnose.constant(x * 2, x, same, {"L": 7})   # named: 2


def test_constant_names_a_whole_number_factor_as_a_sum_in_place_of_a_mean():
    x = heads(10)
    # 12 entries summed (2 examples x 6 queries, say): no named quantity, a count all the same
    reason = diagnose.constant(x * 12, x, same, {"L": 7})
    assert reason.startswith("it is the right answer times 12 (a whole number: as if 12 "
                             "entries were summed where their mean is asked for")
    assert "summed instead of averaged" in reason
    assert "= 1/12: as if 12 entries were averaged where their sum is asked for" in (
        diagnose.constant(x / 12, x, same, {"L": 7}))
    assert "summed" not in diagnose.constant(x * 7, x, same, {"L": 7})     # named: L
    assert diagnose.constant(x * 12.5, x, same, {"L": 7}).endswith("times 12.5")


def test_shift_and_runs_say_a_small_offset_in_words_and_a_complement_is_the_mask_inverted():
    x = heads(10)
    moved = torch.cat([x[..., :1], x[..., :-1]], -1)
    assert "(off by one: entry i holds what belongs at i - 1)" in diagnose.shifted(
        moved, x, same, DIMS)
    lengths = torch.tensor([3, 1, 4])
    right = torch.arange(5)[None, :] < lengths[:, None]                      # (3, 5)
    longer = torch.arange(5)[None, :] <= lengths[:, None]
    assert "1 position longer than it should be (off by one:" in diagnose.mask_runs(
        longer, right, {"batch": 3, "max_len": 5})
    assert "(True/1 exactly where it should be False/0): the mask inverted (flipped" in (
        diagnose.mask_family(~right, right))


def test_a_step_left_out_says_what_that_means_where_the_formula_words_it():
    class Worded(diagnose.Formula):
        def left_out_meaning(self, name):
            return "the mask was not applied" if name == "mask" else ""

    steps = [("scores", lambda _v, x: x["s"]), ("mask", lambda s, x: s * x["m"]),
             ("sum", lambda s, _x: s.sum(-1))]
    formula = Worded(steps, optional=["mask", "sum"])
    found = formula.mistakes({"s": torch.arange(6.0).reshape(2, 3),
                              "m": torch.tensor([1.0, 0.0, 1.0])})
    assert "the mask step is left out: the mask was not applied" in found
    assert "the sum step is left out" in found


def test_error_reason_names_a_refusal_of_the_students_own_and_a_none_with_no_length():
    reason = diagnose.error_reason("key and value must have the same length Lk", DIMS,
                                   'raise ValueError(f"key and value must have ...")')
    assert reason.startswith("the error comes from a raise (or an assert) in your own code")
    assert diagnose.error_reason("Lq != Lk", DIMS, "assert q.shape == k.shape").startswith(
        "the error comes from a raise")
    assert "your own code" not in (diagnose.error_reason("division by zero", DIMS,
                                                         "raised = a / b") or "")
    reason = diagnose.error_reason("object of type 'NoneType' has no len()", DIMS,
                                   "out = attend(layer, h, cache)")
    assert "a fresh, empty cache (KVCache())" in reason
    assert diagnose.error_reason("'NoneType' object is not subscriptable", DIMS, "").startswith(
        "a None is used as a tensor")


def test_error_reason_names_a_tuple_used_as_a_tensor_and_a_size_from_elsewhere():
    reason = diagnose.error_reason("'tuple' object has no attribute 'shape'", DIMS)
    assert reason.startswith("a tuple has no .shape: a tuple is used where one tensor is "
                             "expected") and "unpack it first" in reason
    assert "exercise's object" not in reason        # not the misspelled-attribute sentence
    sizes = {"B": 2, "L": 5, "num_heads": 3, "head_dim": 4, "d_model": 12}
    reason = diagnose.error_reason("shape '[2, 5, 3, 170]' is invalid for input of size 120",
                                   sizes)
    assert reason.endswith("; 170 is none of this call's sizes (no quantity of the exercise "
                           "nor a product of them): a size taken from elsewhere than the "
                           "tensor itself (a notebook variable, a fixed number); read every "
                           "size from the input's .shape")
    named = diagnose.error_reason("shape '[2, 5, 4, 3]' is invalid for input of size 100",
                                  sizes)
    assert "none of this call's sizes" not in named


def test_error_reason_names_a_view_size_read_from_another_tensor():
    sizes = {"B": 3, "Lq": 4, "Lk": 7, "num_heads": 2, "head_dim": 8, "d_model": 16}
    reason = diagnose.error_reason("shape '[3, 4, 2, 8]' is invalid for input of size 336",
                                   sizes)
    assert reason.endswith("; with 7 = Lk in place of 4 = Lq (size 1 of the view) the sizes "
                           "fit: that size was read from another tensor or quantity than the "
                           "one reshaped (read each tensor's sizes from its own .shape)")
    # no quantity fits in place of any size: nothing more is claimed
    other = diagnose.error_reason("shape '[3, 4, 2, 8]' is invalid for input of size 300",
                                  sizes)
    assert "in place of" not in other


# ------------------------------------- the likely cause of an error, from the student's line

def test_error_cause_names_a_key_not_transposed_and_a_transpose_of_other_axes():
    dims = diagnose.named_dims({"batch": 2, "Lq": 4, "Lk": 5, "d_k": 8})
    query, key = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    message = _error_of(lambda: query @ key)
    cause = diagnose.error_cause(message, dims, "scores = (query / d_k ** 0.5) @ key  # (B, L)")
    assert cause.startswith("`key` enters the product untransposed: its second-to-last axis "
                            "has 5 = Lk entries where A's last has 8 = d_k")
    assert "key.transpose(-2, -1) swaps its last two axes" in cause
    # the same error from a product whose operand is transposed once too often
    cause = diagnose.error_cause(message, dims, "w @ key.transpose(-2, -1)")
    assert cause.startswith("`key.transpose(-2, -1)` is transposed before the product")
    # a batched product whose operand swaps axes 0 and 1 (the last two of a 2-D tensor only)
    maps = torch.randn(2, 4, 5)
    message = _error_of(lambda: maps @ maps.transpose(0, 1))
    sizes = diagnose.named_dims({"B": 2, "num_heads": 4, "N": 5})
    cause = diagnose.error_cause(message, sizes, "return (maps @ maps.transpose(0, 1)).mean(0)")
    assert "A @ B broadcasts the axes before its last two" in cause
    assert "`maps.transpose(0, 1)` swaps axes 0 and 1, which are the last two only of a " \
           "tensor of 2 axes" in cause
    # the reduction outside the product is no reduction without keepdim=True
    assert "keepdim" not in diagnose.error_reason(message, sizes,
                                                  "return (maps @ maps.transpose(0, 1)).mean(0)")
    # a line that does not show the product: no claim about its operands
    assert diagnose.error_cause(_error_of(lambda: query @ key), dims, "") is None


def test_error_cause_names_quantities_that_go_together():
    dims = diagnose.named_dims({"batch": 2, "num_heads": 4, "num_kv_heads": 2, "L": 6,
                                "head_dim": 3, "d_model": 12})
    q, k = torch.randn(2, 4, 6, 3), torch.randn(2, 2, 6, 3)
    cause = diagnose.error_cause(_error_of(lambda: q + k), dims, "")
    assert cause.startswith("the key/value heads were not repeated to num_heads: 2 = "
                            "num_kv_heads key/value heads meet 4 = num_heads query heads")
    # the same sizes quoted in a message that names the tensors' shapes
    cause = diagnose.error_cause("the batch dimensions of query (2, 4, 6, 3), key (2, 2, 6, 3) "
                                 "and value (2, 2, 6, 3) do not broadcast", dims, "")
    assert cause.startswith("the key/value heads were not repeated to num_heads")
    # a layer given a head's features where it takes d_model
    heads = torch.randn(2, 4, 6, 3)
    layer = torch.nn.Linear(12, 12)
    cause = diagnose.error_cause(_error_of(lambda: layer(heads)), dims,
                                 "return self.out_proj(heads)")
    assert cause.startswith("`self.out_proj` takes 12 = d_model input features")
    assert "3 = head_dim is one head's share of 12 = d_model = num_heads x head_dim: a " \
           "tensor whose heads are not merged back into d_model features" in cause
    # quantities that do not go together: nothing is said of them
    assert diagnose.error_cause("The size of tensor a (7) must match the size of tensor b (5) "
                                "at non-singleton dimension 1", dims, "x + y") is None


def test_error_cause_names_a_mask_of_the_wrong_shape_and_an_axis_missing():
    dims = diagnose.named_dims({"B": 2, "num_heads": 3, "Lq": 4, "Lk": 5})
    scores, mask = torch.randn(2, 3, 4, 5), torch.ones(2, 5, dtype=torch.bool)[:, None]
    message = _error_of(lambda: scores.masked_fill(~mask, 0.0))
    cause = diagnose.error_cause(message, dims, "scores = scores.masked_fill(~mask, 0.0)")
    assert cause.startswith("the mask's shape: its axes line up with the scores' from the last")
    assert "here 2 = B meets 3 = num_heads); the mask is not broadcast over the heads" in cause
    # two vectors where a table of every pair is meant
    positions, frequencies = torch.arange(6.0), torch.arange(4.0)
    sizes = diagnose.named_dims({"num_positions": 6, "pairs": 4})
    cause = diagnose.error_cause(_error_of(lambda: positions * frequencies), sizes,
                                 "angles = positions * frequencies")
    assert "a table of every pair needs a new axis on one of them: a[:, None] * b[None, :]" \
        in cause
    # a tensor with an axis fewer than the other's, at another axis
    x, y = torch.randn(2, 3, 4, 5), torch.randn(2, 4, 5)
    cause = diagnose.error_cause(_error_of(lambda: x + y), dims, "out = x + y")
    assert cause.startswith("the two tensors on that line differ in size on that axis, "
                            "3 = num_heads against 2 = B")
    assert "only if one of them has fewer axes than the other, an axis missing" in cause
    cause = diagnose.error_cause(_error_of(lambda: x + y), dims, "out = x + y[0]")
    assert cause.startswith("broadcasting lines the axes up from the last, so an axis of "
                            "3 = num_heads meeting one of 2 = B means one tensor has an axis "
                            "fewer or more than the other")
    # a reduction without keepdim=True is error_reason's, not a cause of its own here
    e = torch.randn(2, 3, 5)
    message = _error_of(lambda: e / e.sum(dim=-1))
    assert diagnose.error_cause(message, dims, "return e / e.sum(dim=-1)") is None
    assert "(.sum(dim=-1)) drops the axis it reduces" in diagnose.error_reason(
        message, dims, "return e / e.sum(dim=-1)")


def test_error_cause_names_an_expand_in_another_order_and_a_view_meant_as_a_broadcast():
    dims = {"batch": 2, "num_kv_heads": 4, "groups": 3, "L": 5}
    kv = torch.randn(2, 4, 5)
    message = _error_of(lambda: kv[:, :, None].expand(2, 3, 4, 5))
    cause = diagnose.error_cause(message, dims, "kv[:, :, None].expand(B, G, g, L)")
    assert cause == ("expand keeps every axis the tensor has and grows only its size-1 axes "
                     "(here axis 2): the target sizes (2 = batch, 3 = groups, 4 = num_kv_heads, "
                     "5 = L) are in another order than the tensor's axes; in the tensor's "
                     "order they are (2 = batch, 4 = num_kv_heads, 3 = groups, 5 = L)")
    scores, mask = torch.randn(2, 3, 4, 5), torch.ones(2, 1, 4, 5, dtype=torch.bool)
    message = _error_of(lambda: mask.view(scores.shape))
    line = "mask = mask.view(scores.shape)"
    assert diagnose.error_cause(message, dims, line).startswith(
        "a view/reshape only rearranges the entries a tensor has: `mask` has 40 and the shape "
        "of `scores` holds 3 times as many")
    assert "in place of" not in diagnose.error_reason(message, dims, line)
    # a view to sizes of its own: no broadcast is meant
    assert diagnose.error_cause(message, dims, "mask = mask.view(2, 3, 4, 5)") is None


def test_error_cause_names_a_float_index_and_two_axes_given_apart():
    x = torch.randn(2, 8)
    cause = diagnose.error_cause(_error_of(lambda: x[..., :x.shape[-1] / 2]), DIMS,
                                 "x1 = x[..., :half]")
    assert "compute it with // (integer division)" in cause
    cause = diagnose.error_cause(_error_of(lambda: x.mean(0, 1)), DIMS, "return w.mean(0, 1)")
    assert cause == ("mean() takes its axes as one tuple: mean((0, 1)); mean(0, 1) reads the "
                     "second number as keepdim")
    assert diagnose.error_cause("'x'", DIMS, "return x") is None


def test_restate_error_ends_with_the_likely_cause_as_a_family():
    dims = diagnose.named_dims({"batch": 2, "Lq": 4, "Lk": 5, "d_k": 8})
    query, key = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    text = diagnose.restate_error("attention_scores", "RuntimeError",
                                  _error_of(lambda: query @ key), dims, "(2, 4, 8), (2, 5, 8)",
                                  where="line 3 of cell attention_scores: return query @ key")
    assert "\nWhat that error means: a matrix product" in text
    assert text.endswith("\nLikely cause: `key` enters the product untransposed: its "
                         "second-to-last axis has 5 = Lk entries where A's last has 8 = d_k; "
                         "if its last axis is the one of 8 entries (as a key (..., Lk, d_k) "
                         "has d_k last), it is not transposed before the product: "
                         "key.transpose(-2, -1) swaps its last two axes.")
    assert diagnose.FAMILY_PATTERN.search(text.split("What that error means")[0]
                                          + "\nLikely cause: x.")


def test_error_reason_finds_a_reduction_without_keepdim_in_an_entrywise_call():
    e = torch.randn(2, 3, 5)
    message = _error_of(lambda: torch.div(e, e.sum(-1)))
    assert "(.sum(-1)) drops the axis it reduces" in diagnose.error_reason(
        message, DIMS, "return torch.div(e, e.sum(-1))")
    assert "(.amax(-1)) drops the axis" in diagnose.error_reason(
        message, DIMS, "shifted = e.sub(e.amax(-1))")
    assert "(torch.sum(e, -1)) drops the axis" in diagnose.error_reason(
        message, DIMS, "return e / torch.sum(e, -1)")
    # a reduction of the whole result, which broadcasts against nothing
    assert "keepdim" not in diagnose.error_reason(message, DIMS, "return (e * w).sum(-1)")


def test_error_cause_names_an_axis_from_the_front_an_off_by_one_a_norm_and_an_unpacking():
    dims = {"B": 2, "L": 6, "d_model": 8, "d_ff": 12}
    x = torch.randn(2, 6, 8)
    cause = diagnose.error_cause(_error_of(lambda: torch.softmax(x, dim=3)), dims,
                                 "w = torch.softmax(s, dim=3)")
    assert cause.startswith("`torch.softmax(s, dim=3)` counts axis 3 from the front, and the "
                            "tensor it gets has 3 axes: count the axes the exercise names "
                            "from the end (dim=-1")
    assert diagnose.error_cause(_error_of(lambda: x[:, 6]), dims, "x[:, i + 1]").startswith(
        "index 6 is one past the last of 6 = L entries (0..5): an off-by-one")
    assert diagnose.error_cause(_error_of(lambda: x[:, 9]), dims, "x[:, j]").startswith(
        "index 9 is beyond the 6 = L entries of that axis")
    cause = diagnose.error_cause(_error_of(lambda: torch.nn.RMSNorm(12)(x)), dims,
                                 "h = self.norm2(x)")
    assert cause.startswith("the norm was built for 12 = d_ff features and gets a tensor whose "
                            "last axis has 8 = d_model: build it with the size of the tensor "
                            "it normalises (nn.RMSNorm(d_model)")

    def unpack():
        B, h, L, hd = x.shape
    cause = diagnose.error_cause(_error_of(unpack), dims, "B, h, L, hd = x.shape")
    assert cause.startswith("the line unpacks `x.shape` into 4 names and `x` has 3 axes")
    # the error without the line: no claim about the call or the tensor
    assert diagnose.error_cause(_error_of(unpack), dims, "") is None


def test_error_cause_names_the_heads_behind_flattened_batch_sizes():
    dims = {"batch": 2, "num_heads": 4, "num_kv_heads": 2, "L": 5, "head_dim": 3}
    q, k = torch.randn(8, 5, 3), torch.randn(4, 3, 5)        # (batch * heads, ...) each
    cause = diagnose.error_cause(_error_of(lambda: torch.bmm(q, k)), dims, "torch.bmm(q, k)")
    assert cause.startswith("the key/value heads were not repeated to num_heads: 2 = "
                            "num_kv_heads key/value heads meet 4 = num_heads query heads")
    # batch sizes that no quantity explains: nothing is claimed
    assert diagnose.error_cause(_error_of(lambda: torch.bmm(torch.randn(7, 5, 3), k)), dims,
                                "torch.bmm(q, k)") is None


def test_wrong_shape_goes_on_to_the_likely_cause_of_a_swap_or_a_recut():
    sizes = {"B": 2, "L": 5, "num_heads": 3, "head_dim": 4, "d_model": 12}
    swapped = diagnose.wrong_shape((2, 5, 3, 4), (2, 3, 5, 4), sizes,
                                   "(B, num_heads, L, head_dim)")
    assert swapped.endswith("(num_heads and L exchanged: a transpose(1, 2) too many or too "
                            "few, or a view/reshape given their sizes in the other order)")
    recut = diagnose.wrong_shape((2, 3, 20), (2, 5, 12), sizes, "(B, L, d_model)")
    assert "; the same 120 entries in other sizes, (B, num_heads, L * head_dim) where the " \
           "answer is (B, L, d_model): one way to get this is a view/reshape given its " \
           "sizes in another order" in recut
    # another number of entries: no recut is claimed
    assert "entries in other sizes" not in diagnose.wrong_shape((2, 4, 12), (2, 5, 12), sizes)


def test_float32_rounding_names_a_float32_step_in_a_float64_test():
    expected = torch.randn(3, 4, dtype=torch.float64)
    reason = diagnose.float32_rounding(expected.float().double(), expected)
    assert reason.startswith("it differs from the right answer only by about float32's "
                             "rounding") and "dtype=x.dtype" in reason
    assert diagnose.float32_rounding(expected + 1e-3, expected) is None      # a real error
    assert diagnose.float32_rounding(expected.float(), expected.float()) is None  # float32
    counts = torch.tensor([1e6, 3e6], dtype=torch.float64)
    assert diagnose.float32_rounding(counts + 1, counts) is None             # whole numbers


def test_step_nonfinite_names_a_step_that_gives_the_same_nan_or_inf():
    weights = torch.tensor([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    right = -torch.special.xlogy(weights, weights).sum(-1)                   # finite
    without_w = -weights.log().sum(-1)                                       # inf, then finite
    mistakes = {"the w log w step is log w alone": without_w,
                "the minus sign is left out": -right}
    actual = without_w.clone()
    reason = diagnose.step_nonfinite(actual, mistakes, same)
    assert reason == ("it is what the formula gives when the w log w step is log w alone: the "
                      "same NaN or inf at the same 1 of 2 entries, and the same values at the "
                      "others")
    assert diagnose.FAMILY_PATTERN.search(reason)
    # other values at the finite entries, NaN where the step gives inf, or no finite entry
    # at all: no claim
    assert diagnose.step_nonfinite(actual + 1, mistakes, same) is None
    nan = torch.tensor([float("nan"), float(without_w[1])], dtype=torch.float64)
    assert diagnose.step_nonfinite(nan, mistakes, same) is None
    assert diagnose.step_nonfinite(torch.full((2,), float("inf")), mistakes, same) is None
    assert diagnose.step_nonfinite(right, mistakes, same) is None               # all finite


def test_part_of_names_a_run_of_one_axis_kept_alone():
    """A result cut down to some consecutive entries of one axis (the last position only)
    is named by which entries it keeps; another cut, or other values, is not."""
    expected = torch.randn(2, 3, 4, dtype=torch.float64)
    same = lambda a, b: torch.allclose(a, b)   # noqa: E731
    last = diagnose.part_of(expected[:, -1:], expected, same, {"batch": 2, "L_new": 3})
    assert "only the last 1 of the 3 entries of the L_new axis" in last
    assert "the first 2" in diagnose.part_of(expected[:, :2], expected, same, {})
    assert diagnose.part_of(expected[:, :2] + 1, expected, same, {}) is None
    assert diagnose.part_of(expected[:1, :2], expected, same, {}) is None
    assert diagnose.part_of(expected[:, 1:2], expected, same, {}) is None   # the middle
    assert diagnose.FAMILY_PATTERN.search(last)


def test_mask_runs_leaves_triangles_of_the_other_kind_to_triangle_kind():
    """An upper triangle where a lower one is right is said as such (triangle_kind), not as
    the complement with runs one longer."""
    want = torch.ones(3, 4, dtype=torch.bool).tril(1)
    got = torch.ones(3, 4, dtype=torch.bool).triu(1)
    assert diagnose.mask_runs(got, want, {}) is None
    assert "upper triangle" in diagnose.explain(got, want, torch.equal, got != want, {})


# ------------------------------- sentences that fit the student's line (issue 20, i20fix)

def test_a_product_in_the_other_orientation_says_missing_or_extra_from_the_line():
    """B's last axis with A's last size: a transpose missing where the line uses B as it is,
    one too many where the line transposes it, either without the line, nothing said of B
    for a layer (its sizes are another matter)."""
    dims = diagnose.named_dims({"batch": 2, "Lq": 6, "d_model": 4, "d_ff": 8})
    x, w = torch.randn(2, 6, 4), torch.randn(8, 4)
    message = _error_of(lambda: x @ w)                       # (12x4 and 8x4)
    missing = diagnose.error_reason(message, dims, "h = x @ w")
    assert "so the product wants B transposed" in missing
    extra = diagnose.error_reason(message, dims, "h = x @ w.T.T")
    assert "the line transposes B (`w.T.T`)" in extra and "one too many" in extra
    assert "wants B transposed" not in extra
    assert "a transpose missing" in diagnose.error_reason(message, dims, "")
    assert "one too many" in diagnose.error_reason(message, dims, "")
    layer = diagnose.error_reason(message, dims, "h = self.down_proj(x)")
    assert "transpose" not in layer and "pairs the last axis of A" in layer


def test_the_missing_axis_sentence_only_where_the_line_can_drop_an_axis():
    dims = {"B": 2, "L": 6, "d_model": 8, "d_ff": 12}
    x, h = torch.randn(2, 6, 8), torch.randn(2, 6, 12)
    message = _error_of(lambda: x + h)
    same_rank = diagnose.error_cause(message, dims, "return self.down_proj(x + self.drop(h))")
    assert same_rank.startswith("the two tensors on that line differ in size on that axis, "
                                "8 = d_model against 12 = d_ff")
    assert "an axis fewer or more" not in same_rank
    dropped = diagnose.error_cause(message, dims, "out = x + h[:, 0]")
    assert "an axis fewer or more" in dropped


def test_the_leaf_sentence_fits_a_parameter_or_an_argument():
    message = "a leaf Variable that requires grad is being used in an in-place operation."
    argument = diagnose.error_reason(message, DIMS, "scores[~mask] = -1e9")
    assert "`scores`" in argument and "argument" in argument and "no_grad" not in argument
    assert "`scores`" in diagnose.error_reason(message, DIMS, "scores.masked_fill_(m, 0)")
    parameter = diagnose.error_reason(message, DIMS, "proj.weight.copy_(w)")
    assert "`proj.weight`, a parameter" in parameter and "torch.no_grad()" in parameter
    assert "argument" not in parameter
    assert diagnose.error_reason(message, DIMS, "") == diagnose.MESSAGES["error_leaf"]


def test_student_line_is_the_call_into_the_course_package_not_its_frame(tmp_path,
                                                                          monkeypatch):
    """An error raised inside the course's reference package (`solutions`, imported by a
    later chapter) is placed at the student's line that called it."""
    import linecache
    import sys
    import types

    from chapters.checks import operations
    package = tmp_path / "solutions"
    package.mkdir()
    (package / "__init__.py").write_text("def attend(q, k):\n"
                                         "    if q.shape[-1] != k.shape[-1]:\n"
                                         "        raise ValueError('d_k differs')\n")
    module = types.ModuleType("solutions")
    module.__path__ = [str(package)]
    exec(compile((package / "__init__.py").read_text(), str(package / "__init__.py"),
                 "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "solutions", module)
    source = "def core(q, k):\n    return attend(q, k.transpose(-2, -1))\n"
    linecache.cache["cell core"] = (len(source), None, source.splitlines(True), "cell core")
    namespace = {"attend": module.attend}
    exec(compile(source, "cell core", "exec"), namespace)
    error = operations.attempt(namespace["core"], torch.randn(2, 3), torch.randn(2, 3))[1]
    assert error[3] == "line 2 of cell core: return attend(q, k.transpose(-2, -1))"


def test_student_line_prefers_the_students_registered_cell_to_a_given_one():
    """A given cell the kit ran without registering its lines is the course's: the line
    quoted is the student's call into it."""
    import linecache

    from chapters.checks import operations
    given = "def given(x):\n    return x @ x\n"
    namespace = {}
    exec(compile(given, "nb cell 3", "exec"), namespace)
    source = "def mine(x):\n    return given(x)\n"
    linecache.cache["nb cell 5"] = (len(source), None, source.splitlines(True), "nb cell 5")
    exec(compile(source, "nb cell 5", "exec"), namespace)
    error = operations.attempt(namespace["mine"], torch.randn(2, 3))[1]
    assert error[3] == "line 2 of nb cell 5: return given(x)"


def test_call_reasons_name_what_a_call_was_given():
    dims = {"B": 2, "L": 6, "V": 7}
    assert "merge_heads() takes 1 positional argument(s) and the line gives it 2" in \
        diagnose.error_reason("merge_heads() takes 1 positional argument but 2 were given",
                              dims)
    a = torch.randn(2, 3)
    assert "torch.cat([a, b], dim=...)" in diagnose.error_reason(
        _error_of(lambda: torch.cat(a, a, dim=-1)), dims)
    joined = diagnose.error_reason(_error_of(lambda: torch.cat([a, a.argmax(-1)], dim=1)),
                                   dims, "t = torch.cat([t, last.argmax(-1)], dim=1)")
    assert "one has 2 and another 1" in joined and "`last.argmax(-1)` drops the axis" in joined
    logits, targets = torch.randn(2, 6, 7), torch.randint(7, (2, 6))
    flat = diagnose.error_reason(_error_of(lambda: F.cross_entropy(logits, targets)), dims)
    assert flat.startswith("cross_entropy takes the classes on axis 1") and "flatten" in flat
    targets[0, 0] = -100
    ignored = diagnose.error_reason(_error_of(lambda: F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=0)), dims)
    assert "-100 is cross_entropy's default ignore_index" in ignored
    # a keyword that PyTorch's own call on the line does not take: not the student's signature
    message = _error_of(lambda: torch.ones(2, 2).tril(dtype=torch.bool))
    reason = diagnose.error_reason(message, dims, "return torch.ones(n, n).tril(dtype=torch.bool)")
    assert reason.startswith("tril() is PyTorch's and takes no dtype=")
    assert "signature promises" in diagnose.error_reason(
        "attend() got an unexpected keyword argument 'mask'", dims, "out = attend(q, mask=m)")


def test_error_cause_names_the_whole_operand_an_integer_index_and_a_T():
    dims = {"B": 2, "L": 5, "num_heads": 3, "head_dim": 4, "d_model": 12}
    out, bias = torch.randn(2, 5, 4), torch.randn(12)
    cause = diagnose.error_cause(_error_of(lambda: out + bias), dims, "out = out + bias")
    assert "here `bias` brings all 12 = d_model entries" in cause
    assert "brings all" not in diagnose.error_cause(_error_of(lambda: out + bias), dims,
                                                    "out = out + bias * 2")
    tokens = torch.zeros(2, 3)

    def model(x):
        B, L = x.shape
    cause = diagnose.error_cause(_error_of(lambda: model(tokens[:, -1])), dims,
                                 "logits = model(tokens[:, -1], start=3)")
    assert cause.startswith("`tokens[:, -1]` indexes with an integer, which removes that axis")
    maps = torch.randn(4, 3, 25)
    cause = diagnose.error_cause(_error_of(lambda: maps @ maps.T), {"B": 4, "num_heads": 3},
                                 "return (maps @ maps.T).mean(0)")
    assert "`maps.T` uses .T, which reverses all the axes" in cause
    index = diagnose.error_cause(_error_of(lambda: out[2]), dims, "y = out[perm]")
    assert "one past the last" in index and "indices meant for a longer axis" in index


def test_an_error_inside_a_called_function_and_too_many_positional_numbers():
    """A line that only calls a function: the failure is inside it, so what is said is of the
    tensors given to it (no claim about a mask or the line's operands); a call given more
    positional numbers than any of its forms takes."""
    dims = {"B": 2, "num_heads": 4, "L": 5, "head_dim": 3}
    weights, values = torch.randn(2, 4, 5, 5), torch.randn(2, 5, 4, 3)
    message = _error_of(lambda: weights @ values)
    line = "heads, weights = scaled_dot_product_attention(q, k, v, mask)"
    cause = diagnose.error_cause(message, dims, line)
    assert cause.startswith("the operation that failed is inside `scaled_dot_product_attention`")
    assert "mask" not in cause
    assert diagnose.error_cause(message, dims, "out = weights @ values") != cause
    kv = torch.randn(2, 2, 5, 3)
    message = _error_of(lambda: kv.repeat_interleave(2, 1, 1))
    assert diagnose.error_reason(message, dims, "return kv.repeat_interleave(G, 1, 1)") == (
        "repeat_interleave() takes at most 2 positional arguments and the line gives it 3: "
        "the others go by keyword (output_size=..., as its forms above list them after the *)")


def _attention_steps(query, key, value):
    """{"steps", "inputs"} as common.step_values gives them, for attention written out."""
    formula = diagnose.Formula([("Q K^T product", lambda _v, x: x["q"] @ x["k"].transpose(-2, -1)),
                                ("scale", lambda s, _x: s / 2.0),
                                ("mask", lambda s, _x: s),
                                ("softmax", lambda s, _x: torch.softmax(s, dim=-1)),
                                ("weighted sum", lambda w, x: w @ x["v"])])
    inputs = {"q": query, "k": key, "v": value}
    return {"steps": formula.values(inputs), "inputs": inputs}


def test_formula_values_gives_each_step_and_none_where_a_step_changes_nothing():
    """Formula.values: the value after each step, None for a step that changes nothing
    (here the mask step with no mask), and for a formula with a state only what a step made."""
    q, k, v = (torch.randn(3, 4, dtype=torch.float64) for _ in range(3))
    values = _attention_steps(q, k, v)["steps"]
    assert [name for name, _ in values] == ["Q K^T product", "scale", "mask", "softmax",
                                            "weighted sum"]
    assert values[2][1] is None
    assert torch.allclose(values[4][1], torch.softmax(q @ k.T / 2, dim=-1) @ v)
    state = diagnose.Formula([("project", lambda _v, x: {"a": x["x"] * 2, "b": x["x"]}),
                              ("double b", lambda st, _x: {**st, "b": st["b"] * 2}),
                              ("keep", lambda st, _x: {**st, "b": st["b"].clone()})])
    made = state.values({"x": torch.ones(2)})
    assert sorted(made[0][1]) == ["a", "b"] and sorted(made[1][1]) == ["b"]
    assert made[2][1] is None


def test_traced_says_where_the_students_lines_depart_from_the_formula():
    """The trace family on synthetic traces: the last step the student's values reproduce,
    the next one, the first line after it whose value is none of the formula's, and how
    that value differs (a reduction subtracted, a value of the formula added, squared);
    nothing where no step is reproduced, and a right trace with a wrong result says that
    what is returned is another value."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, dtype=torch.float64) for _ in range(3))
    values = _attention_steps(q, k, v)
    same = lambda a, b: torch.allclose(a.double(), b.double(), atol=1e-5)   # noqa: E731
    dims = {"batch": 2, "L": 5, "d_k": 4}
    scores = q @ k.transpose(-2, -1) / 2
    shifted = scores - scores.amax(dim=-2, keepdim=True)                    # over the queries
    weights = shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)
    trace = [("line 1 of your cell", "s = q @ k.mT / 2", (q @ k.transpose(-2, -1)).float()),
             ("line 1 of your cell", "s = q @ k.mT / 2", scores.float()),
             ("line 2 of your cell", "z = s - s.amax(-2)", shifted.float()),
             ("line 3 of your cell", "w = z.exp() / ...", weights.float()),
             ("line 4 of your cell", "o = w @ v", (weights @ v).float())]
    reason = diagnose.traced((weights @ v).float(), values, [trace], same, dims)
    assert reason.startswith("your code agrees with the formula up to its scale step (at line 1 "
                             "of your cell: `s = q @ k.mT / 2`); the softmax step is where it "
                             "departs; the first value after that which is none of the "
                             "formula's is computed at line 2 of your cell: `z = s - s.amax(-2)`")
    assert "with its maximum along the L axis (dim=-2) subtracted" in reason
    assert diagnose.FAMILY_PATTERN.search(diagnose.explained("output", reason))
    # every step right, then the value of the formula added: what is returned is another
    right = torch.softmax(scores, dim=-1) @ v
    residual = [("line 1 of your cell", "s = ...", scores),
                ("line 2 of your cell", "w = ...", torch.softmax(scores, dim=-1)),
                ("line 3 of your cell", "o = w @ v + v", right),
                ("line 3 of your cell", "o = w @ v + v", right + v)]
    reason = diagnose.traced(right + v, values, [residual], same, dims)
    assert reason.startswith("your code computes every step of the formula, the last "
                             "(weighted sum) at line 3")
    assert "it is that value plus the input v" in reason
    squared = residual[:2] + [("line 3 of your cell", "w = w ** 2",
                               torch.softmax(scores, dim=-1) ** 2)]
    assert "squared" in diagnose.traced(torch.softmax(scores, -1) ** 2 @ v, values, [squared],
                                        same, dims)
    # the trace that reproduces most steps is the one read (another call's trace is not)
    other = [("line 1 of your cell", "s = ...", scores + 1)]
    assert diagnose.traced(right + v, values, [residual, other], same, dims) == \
        diagnose.traced(right + v, values, [residual], same, dims)
    # nothing reproduced, no trace, or the result right after all: no claim
    assert diagnose.traced(right + v, values, [other], same, dims) is None
    assert diagnose.traced(right + v, values, [], same, dims) is None
    assert diagnose.traced(right, values, [residual[:3]], same, dims) is None


def test_a_restated_error_reads_the_students_line_in_either_language():
    """The student's process says where it raised in the notebook's language ("line 3 of
    cell attention: code", "单元格 attention 第 3 行：code"); the likely cause read from that
    line is the same in both."""
    dims = diagnose.named_dims({"batch": 2, "Lq": 6, "Lk": 5, "d_k": 4})
    query, key = torch.randn(2, 6, 4), torch.randn(2, 5, 4)
    message = _error_of(lambda: query @ key)
    code = "scores = query @ key / d_k ** 0.5"
    english = diagnose.restate_error("attention_scores", "RuntimeError", message, dims,
                                     where=f"line 3 of cell attention: {code}")
    chinese = diagnose.restate_error("attention_scores", "RuntimeError", message, dims,
                                     where=f"单元格 attention 第 3 行：{code}")
    cause = diagnose.error_cause(message, dims, code)
    assert cause and cause in english and cause in chinese


def test_a_view_of_a_leaf_written_in_place_may_be_a_parameters():
    """PyTorch says "a view of a leaf Variable" when the name written holds a view: of a
    parameter as well as of an argument, so the sentence names both ways out."""
    weight = torch.nn.Parameter(torch.randn(4, 4))
    rows = weight.view(2, 8)
    message = _error_of(lambda: rows.__setitem__(slice(1, None), rows[:1]))
    reason = diagnose.error_reason(message, {}, "rows[1:] = rows[:1]")
    assert "torch.no_grad()" in reason and "compute a new tensor" in reason
    plain = _error_of(lambda: weight.add_(1))          # the leaf itself, through a name
    assert "torch.no_grad()" not in diagnose.error_reason(plain, {}, "w.add_(1)")


def test_axis_names_drop_an_ordinal_slot_in_either_language():
    """An axis label with a slot for its index ("head {}", "第 {} 个头") names the axis
    without one: the Chinese ordinal's 第 and 个 go with the number."""
    labels = ("第 {} 个头", "每个头的第 {} 行", "head {} of the pruned module")
    assert diagnose.axis_names((2, 3, 4), {}, labels) == [
        "头", "每个头的行", "head of the pruned module"]


# ------------------------------- the shapes on the raising line (helper i20raise's additions)

def _traced_in_a_cell(source, filename, function, *args):
    """attempt_traced()'s error of `function` (defined by `source`, compiled as a cell named
    `filename` whose lines are registered, as the kit and the grader register them)."""
    import linecache

    from chapters.checks import operations
    namespace = {"torch": torch}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return operations.attempt_traced(namespace[function], *args)[1]


def test_line_shapes_record_the_failing_call_the_lines_tensors_and_the_frames_others():
    source = ("def f(weights, value):\n"
              "    blocks = value.reshape(4, 2, 3)\n"
              "    i = 1\n"
              "    return weights[:, -1:] @ blocks[i]\n")
    error = _traced_in_a_cell(source, "cell f, line 1", "f", torch.zeros(2, 5, 4),
                              torch.zeros(4, 6))
    report = json.loads(error[4])
    assert report["call"] == ["matmul", [[2, 1, 4], [2, 3]]]
    assert report["names"] == [["weights[:, -1:]", [2, 1, 4]], ["weights", [2, 5, 4]],
                               ["blocks[i]", [2, 3]], ["blocks", [4, 2, 3]]]
    assert report["others"] == [["value", [4, 6]]]
    # attempt() alone (no mode watching torch's calls) still reads the line
    from chapters.checks import operations
    assert json.loads(_raise_in_a_cell(source, "cell f, line 1", "f", torch.zeros(2, 5, 4),
                                       torch.zeros(4, 6))[4])["call"] is None
    assert operations.line_shapes(ValueError("no traceback")) == ""


def test_a_report_of_shapes_that_is_not_one_changes_nothing():
    dims = {"batch": 2, "Lq": 5, "Lk": 7}
    message = ("The size of tensor a (5) must match the size of tensor b (7) at "
               "non-singleton dimension 3")
    plain = diagnose.error_cause(message, dims, "s = s.masked_fill(~mask, 0.0)")
    for lie in ("not json", "[1, 2]", '{"call": ["mul", [[-1, "x"]]], "names": 3}',
                '{"call": ["mul", [[2, 5], [2, 7]], 4]}', "x" * 5000):
        assert diagnose.error_cause(message, dims, "s = s.masked_fill(~mask, 0.0)",
                                    lie) == plain
    assert diagnose._line_report("") == (None, [], [])


def _report(call=None, names=(), others=()):
    return json.dumps({"call": call, "names": [list(n) for n in names],
                       "others": [list(o) for o in others]})


def test_shape_causes_name_the_operand_and_its_quantities():
    dims = {"batch": 2, "num_heads": 4, "head_dim": 3, "d_model": 12, "Lq": 5, "Lk": 7}
    # an operand transposed against the other (a mask (..., Lk, Lq) on scores (..., Lq, Lk))
    cause = diagnose.error_cause(
        "The size of tensor a (5) must match the size of tensor b (7) at non-singleton "
        "dimension 3", dims, "s = s.masked_fill(~mask, 0.0)",
        _report(["masked_fill", [[2, 4, 5, 7], [2, 1, 7, 5]]],
                [("s", [2, 4, 5, 7]), ("mask", [2, 1, 7, 5])]))
    assert "`mask` (2 = batch, 1, 7 = Lk, 5 = Lq) has its last two axes in the other order" \
        in cause
    # operands of a product that fit in the other order
    cause = diagnose.error_cause(
        "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: "
        "[2, 5].", dims, "out = value @ weights",
        _report(["matmul", [[2, 7, 3], [2, 5, 7]]], [("value", [2, 7, 3]),
                                                     ("weights", [2, 5, 7])]))
    assert "weights` (2 = batch, 5 = Lq, 7 = Lk) @ `value`" in cause and "other order" in cause
    # two operands of one shape: the transpose, or `*` meant
    cause = diagnose.error_cause(
        "Expected size for first two dimensions of batch2 tensor to be: [2, 12] but got: "
        "[2, 5].", dims, "g = a @ b", _report(["__matmul__", [[2, 5, 12], [2, 5, 12]]]))
    assert "needs the second transposed" in cause and "`*`" in cause
    # a join of tensors whose ranks differ by a size-1 axis
    cause = diagnose.error_cause(
        "Tensors must have same number of dimensions: got 2 and 3", dims,
        "t = torch.cat([t, last.argmax(-1, keepdim=True)], dim=1)",
        _report(["cat", [[2, 5], [2, 1, 1]]], [("t", [2, 5]), ("last", [2, 1, 12])]))
    assert "(2 = batch, 1, 1) has an axis of size 1 that `t`" in cause
    assert "`last` (2 = batch, 1, 12 = d_model) has that size-1 axis" in cause
    # twice the entries on the axis where the error meets (a chunk along the first axis)
    cause = diagnose.error_cause(
        "The size of tensor a (6) must match the size of tensor b (3) at non-singleton "
        "dimension 3", dims, "y = x1 * cos",
        _report(["__mul__", [[1, 4, 5, 6], [5, 3]]], [("x1", [1, 4, 5, 6]), ("cos", [5, 3])]))
    assert "`x1`" in cause and "2 times the entries of `cos`" in cause and "axis 0" in cause
    # a view asked for half of what the tensor holds
    cause = diagnose.error_cause(
        "shape '[5, 12]' is invalid for input of size 120", dims, "t = table.reshape(5, 12)",
        _report(["reshape", [[5, 12, 2]]], [("table", [5, 12, 2])]))
    assert "holds 2 times the 60 entries" in cause and "6 = d_model / 2" in cause
    # a shape unpacked into fewer names than the tensor has axes
    cause = diagnose.error_cause("too many values to unpack (expected 2)", dims,
                                 "B, L = mask.shape", _report(None, [("mask", [2, 1, 1, 7])]))
    assert cause.startswith("`mask` (2 = batch, 1, 1, 7 = Lk) has 4 axes where the line "
                            "unpacks 2 names")
    # an axis past the last, where the tensor has axes of another flattened into one
    cause = diagnose.error_cause(
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
        {"B": 2}, "m = maps.transpose(1, 2)",
        _report(None, [("maps", [2, 60])], [("weights", [2, 3, 4, 5])]))
    assert "its axis of 60 = 3 * 4 * 5, axes 1..3 of `weights`" in cause
    assert "flattened (merged)" in cause
    # a loss given inputs and targets whose rows differ by one position
    cause = diagnose.error_cause(
        "Expected input batch_size (14) to match target batch_size (12).", {"B": 2},
        "loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())",
        _report(["cross_entropy", [[14, 9], [12]]], [("logits", [2, 7, 9]),
                                                     ("targets", [2, 6])]))
    assert "they differ on axis 1 (7 against 6), by one position" in cause


def test_traced_shape_names_the_line_that_made_a_wrong_shape_and_what_it_did():
    """The trace family for a wrong shape (i20shape), on synthetic traces with their data
    flow (function name, [(shape, source record)]): the first line that made the returned
    shape (a line that keeps it, such as + b, is passed back over) and what it did to the
    shape it read: a reduction over another axis than the answer's, axes merged that the
    answer merges otherwise, a cat where the answer stacks, size-1 axes removed short; no
    claim where no traced line computed the value returned."""
    dims = {"batch": 2, "num_heads": 4, "L": 5, "d_model": 12}
    product = torch.randn(2, 4, 5, 12)
    summed = product.sum(0)
    trace = [("line 1 of your cell", "p = heads @ blocks", product, "matmul",
              (((2, 4, 5, 3), -1), ((4, 3, 12), -1))),
             ("line 2 of your cell", "o = p.sum(0)", summed, "sum", (((2, 4, 5, 12), 0),)),
             ("line 3 of your cell", "o = o + b", summed + 1, "add", (((4, 5, 12), 1),))]
    reason = diagnose.traced_shape(summed + 1, (2, 5, 12), [trace], dims)
    assert reason.startswith(". Your code makes that shape at line 2 of your cell: "
                             "`o = p.sum(0)`, which reduces the batch axis (dim=0)")
    assert "the num_heads axis (dim=1) reduced instead" in reason
    # axes merged that the answer merges otherwise (a transpose missing before the merge)
    heads = torch.randn(2, 5, 4, 3)
    flat = heads.flatten(1, 2)
    merged = [("line 1 of your cell", "x = x.flatten(1, 2)", flat, "flatten",
               (((2, 5, 4, 3), -1),))]
    reason = diagnose.traced_shape(flat, (2, 5, 12), [merged], {**dims, "head_dim": 3})
    assert "merges L and num_heads" in reason and "the answer merges num_heads and head_dim" \
        in reason
    # a cat where the answer has a new axis (torch.stack)
    rows = [torch.randn(2, 9) for _ in range(5)]
    joined = torch.cat(rows, dim=1)
    cat = [("line 1 of your cell", "torch.cat(chosen, dim=1)", joined, "cat",
            tuple(((2, 9), -1) for _ in rows))]
    reason = diagnose.traced_shape(joined, (2, 5, 9), [cat], {"B": 2, "vocab_size": 9})
    assert "joins 5 tensors" in reason and "torch.stack(..., dim=1)" in reason
    # size-1 axes: one removed where the answer removes both
    mask = torch.ones(3, 1, 6, dtype=torch.bool)
    indexed = [("line 1 of your cell", "mask = mask[:, 0]", mask, "__getitem__",
                (((3, 1, 1, 6), -1),))]
    reason = diagnose.traced_shape(mask, (3, 6), [indexed], {"B": 3, "Lk": 6})
    assert "removes 1 of the size-1 axes" in reason and "the answer removes 2" in reason
    # a split without its transpose; a repeat by another count; a broadcast against a tensor
    # with an axis too many, made lines before
    split = heads.view(2, 5, 4, 3)
    reason = diagnose.traced_shape(split, (2, 4, 5, 3), [[(
        "line 1 of your cell", "x.view(B, L, h, hd)", split, "view", (((2, 5, 12), -1),))]],
        {**dims, "head_dim": 3})
    assert "splits the d_model axis" in reason and "transpose or permute" in reason
    kv = torch.randn(2, 4, 5, 3)
    reason = diagnose.traced_shape(kv, (2, 8, 5, 3), [[(
        "line 1 of your cell", "kv.repeat_interleave(g, 1)", kv, "repeat_interleave",
        (((2, 2, 5, 3), -1),))]], {"B": 2, "num_heads": 8, "num_kv_heads": 2, "L": 5})
    assert "repeats the num_kv_heads axis 2 times" in reason and "8 = num_heads" in reason
    wide, out = torch.ones(2, 1, 1, 1, 6, dtype=torch.bool), torch.randn(2, 2, 3, 5, 6)
    broadcast = [("line 1 of your cell", "m = m.unsqueeze(1)", wide, "unsqueeze",
                  (((2, 1, 1, 6), -1),)),
                 ("line 2 of your cell", "s.masked_fill(m, 0)", out, "masked_fill",
                  (((2, 3, 5, 6), -1), ((2, 1, 1, 1, 6), 0)))]
    reason = diagnose.traced_shape(out, (2, 3, 5, 6), [broadcast], {"B": 2, "Lk": 6})
    assert "broadcasts" in reason and "made at line 1 of your cell: `m = m.unsqueeze(1)`" \
        in reason
    # a comparison broadcast the other way round, then size-1 axes added: the comparison's
    # line is named (the line that only adds size-1 axes is passed back over)
    column = torch.arange(7.0)[:, None]
    real = column < torch.tensor([3.0, 4.0, 5.0, 6.0])
    padded = real[:, None, None, :]
    compared = [("line 1 of your cell", "p = positions[:, None]", column, "__getitem__",
                 (((7,), -1),)),
                ("line 2 of your cell", "real = p < lengths", real, "lt",
                 (((7, 1), 0), ((4,), -1))),
                ("line 3 of your cell", "real[:, None, None, :]", padded, "__getitem__",
                 (((7, 4), 1),))]
    reason = diagnose.traced_shape(padded, (4, 1, 1, 7), [compared], {"B": 4, "max_len": 7})
    assert "line 2 of your cell: `real = p < lengths`, which combines a (max_len, axis 1) and " \
           "a (B) tensor" in reason and "the answer has (B, max_len)" in reason
    # no line of the student's computed the value returned: no claim
    assert diagnose.traced_shape(torch.zeros(4, 5, 12), (2, 5, 12), [trace], dims) is None
    # without the trace, the shape alone says the merge
    merged_shape = diagnose.wrong_shape((2, 45), (2, 5, 9), {"B": 2, "num_tokens": 5,
                                                             "vocab_size": 9})
    assert merged_shape.startswith("num_tokens and vocab_size are merged into one axis of 45")
    assert diagnose.FAMILY_PATTERN.search(merged_shape)


def test_traced_follows_the_data_flow_to_the_wrong_value_a_departing_line_reads():
    """Where the first line whose value is none of the formula's only reads a wrong value
    (values repeated in another order for the heads, computed lines before), the trace
    family names the line that computed that value and how it differs, by the data flow."""
    q, k, v = torch.randn(3, 2, 5, 4, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(1))
    scores = q @ k.transpose(-2, -1) / 2
    weights = torch.softmax(scores, dim=-1)
    reversed_v = v.flip(1)
    trace = [("line 1 of your cell", "v = v.flip(1)", reversed_v, "flip", (((2, 5, 4), -1),)),
             ("line 2 of your cell", "s = q @ k.mT / 2", scores, "div", (((2, 5, 5), -1),)),
             ("line 3 of your cell", "w = s.softmax(-1)", weights, "softmax",
              (((2, 5, 5), 1),)),
             ("line 4 of your cell", "o = w @ v", weights @ reversed_v, "matmul",
              (((2, 5, 5), 2), ((2, 5, 4), 0)))]
    reason = diagnose.traced(weights @ reversed_v, _attention_steps(q, k, v), [trace],
                             lambda a, b: torch.allclose(a, b.to(a.dtype), atol=1e-5),
                             {"batch": 2, "L": 5, "d_k": 4})
    assert "is computed at line 1 of your cell: `v = v.flip(1)`" in reason
    assert "runs in reverse order" in reason and "reads it is line 4 of your cell" in reason


# ------------------------------------------------- steps done on the wrong tensor or value

def _linear_weights(seed, **shapes):
    """{name: float64 standard normal tensor of `shape`} for the formulas' weight inputs."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=generator, dtype=torch.float64)
            for name, shape in shapes.items()}


def test_multihead_formula_names_masked_scores_filled_with_zero_and_the_mask_after_softmax():
    from chapters.checks import formulas   # grader-only: the exercises' formulas
    B, L, D, h = 2, 5, 8, 2
    x = _linear_weights(0, query=(B, L, D), **{f"{n}_w": (D, D) for n in "qkvo"},
                        **{f"{n}_b": (D,) for n in "qkvo"})
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    inputs = {**x, "key": x["query"], "value": x["query"], "mask": mask}
    formula = formulas.FORMULAS["multi-head weights"](DIMS, num_heads=h)
    mistakes = formula.mistakes(inputs)

    def split(t):
        return t.reshape(B, L, h, D // h).transpose(1, 2)                 # (B, h, L, hd)
    q, k = (split(F.linear(x["query"], x[f"{n}_w"], x[f"{n}_b"])) for n in "qk")
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // h)                   # (B, h, L, L)
    zero_filled = scores.masked_fill(~mask, 0.0).softmax(-1)
    message = diagnose.one_step(zero_filled, mistakes, same)
    assert "mask step fills the masked scores with 0" in message and "-inf" in message
    # a number close to 0: the same values at float32's tolerance
    assert diagnose.one_step(scores.masked_fill(~mask, -1e-9).softmax(-1), mistakes,
                             lambda a, b: common.close(a, b, torch.float32)) == message
    after = scores.softmax(-1).masked_fill(~mask, 0.0)
    assert "the mask step comes after the softmax" in diagnose.one_step(after, mistakes, same)
    # no mask: neither is a fit
    unmasked = formula.mistakes({**inputs, "mask": None})
    assert not any("masked scores with 0" in sentence or "after the softmax" in sentence
                   for sentence in unmasked)


def test_one_role_split_names_which_tensor_was_split_another_way():
    from chapters.checks import formulas
    h, g, B, L, hd = 4, 2, 2, 3, 2
    state = _linear_weights(1, q=(B, L, h * hd), k=(B, L, g * hd), v=(B, L, g * hd))
    ways = formulas._one_role_splits(h, g)
    interleaved_keys = next(step for sentence, step in ways.items()
                            if "interleaves" in sentence and "key alone" in sentence)
    out = interleaved_keys(state, {})
    assert torch.equal(out["k"], state["k"].reshape(B, L, hd, g).permute(0, 3, 1, 2))
    assert torch.equal(out["q"], state["q"].reshape(B, L, h, hd).transpose(1, 2))
    assert torch.equal(out["v"], state["v"].reshape(B, L, g, hd).transpose(1, 2))
    assert len(ways) == 6   # two ways, three roles


def test_project_heads_formula_names_a_split_without_its_transpose_and_other_weights():
    from chapters.checks import formulas
    B, L, D, h, g = 2, 3, 8, 4, 2
    x = _linear_weights(2, x=(B, L, D), q_w=(D, D), q_b=(D,), k_w=(D // 2, D),
                        k_b=(D // 2,), v_w=(D // 2, D), v_b=(D // 2,))
    formula = formulas.FORMULAS["project heads"](DIMS, num_heads=h, num_kv_heads=g, role="v")
    mistakes = formula.mistakes(x)
    projected = F.linear(x["x"], x["v_w"], x["v_b"])                       # (B, L, g * hd)
    assert "reshapes without the transpose" in diagnose.one_step(
        projected.reshape(B, g, L, D // h), mistakes, same)
    by_k = F.linear(x["x"], x["k_w"], x["k_b"]).reshape(B, L, g, D // h).transpose(1, 2)
    assert "uses k_proj's weights instead of v_proj's" in diagnose.one_step(by_k, mistakes,
                                                                             same)
    # q_proj has another width than v_proj: no fit (the shape says it)
    assert not any("q_proj" in sentence for sentence in mistakes)


def test_sublayer_reads_names_the_tensor_a_feed_forward_projection_was_given():
    from chapters.checks import formulas
    B, L, D, F_ = 2, 3, 4, 6
    x = _linear_weights(3, x=(B, L, D), n1_w=(D,), gate_w=(F_, D), up_w=(F_, D),
                        down_w=(D, F_))

    def norm(t, inputs, which):   # a stand-in norm: the steps only pass it along
        return t * inputs[f"{which}_w"]
    summed = x["x"] + 1.0                                                   # (B, L, D)
    state = {"x": summed, "h": summed * 2.0, "a": torch.ones(B, L, D, dtype=torch.float64)}
    ways = formulas._sublayer_reads(norm)
    step = next(step for sentence, step in ways.items()
                if sentence.startswith("gives gate_proj norm1(x)"))
    hidden = F.silu(F.linear(norm(x["x"], x, "n1"), x["gate_w"])) * F.linear(state["h"],
                                                                              x["up_w"])
    assert torch.allclose(step(state, x)["f"], F.linear(hidden, x["down_w"]))
    assert any(sentence.startswith("gives up_proj x = x + attention") for sentence in ways)
    # both projections fed the sum is norm2 left out, a skip of the block's formula already
    assert not any(sentence.startswith("gives gate_proj and up_proj x = x")
                   for sentence in ways)


def test_error_reason_says_a_python_number_has_no_tensor_method():
    loss = torch.tensor(2.0, requires_grad=True) * 3
    message = _error_of(lambda: loss.item().backward())
    reason = diagnose.error_reason(message, DIMS)
    assert reason.startswith("a Python float has no attribute backward")
    assert "plain Python number" in reason and "__init__" not in reason
    assert diagnose.error_reason(_error_of(lambda: (4).sqrt()), DIMS).startswith(
        "a Python int has no attribute sqrt")
    # a missing name on any other object keeps its own explanation
    assert "__init__" in diagnose.error_reason(_error_of(lambda: torch.nn.Linear(2, 2).W), DIMS)
