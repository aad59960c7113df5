"""Mistakes named by their shape: the families of wrong answers that any exercise can have.

A check that finds the student's output wrong, and no catalogued mistake of its table that
matches, asks these families before it says only "is wrong": each family is one function
that looks at the values already in hand (the student's output and the expected one, both
tensors of the same exercise) and returns a sentence naming the mistake, or None when the
values do not fit it. They read nothing but their arguments, so they run alike in the
grader and in the student's kit (which replays the expected values from its fixtures).

Words, not axis numbers: `dims` is {name: size} of the exercise's quantities (the check's
own parameters, e.g. {"batch": 2, "num_heads": 4, "L": 6, "head_dim": 3}, plus those that
follow from them, see named_dims()); an axis is named by the quantity whose size it has.

The families, in the order explain() tries them (the most specific first):
- wrong_shape: which axis has which size, and which quantity that size equals;
- one_step: the formula with one of its steps left out or done on the wrong input (the
  check computes those variants from the exercise's steps, see Formula);
- other_layout: the expected values in another layout (two axes swapped, an axis
  reversed, the factors of one axis in the other order, a view without its transpose);
- constant: the expected values times a constant, or plus one (which quantity it equals);
- shifted: the expected values moved by k positions along one axis;
- mask_family: a 0/1 mask that is the complement of the right one, or a triangle whose
  diagonal is off by k;
- localized: right everywhere except one index (or one block) of one axis;
- restate_error: the student's exception, its sizes named by the exercise's quantities.

Every sentence is a template of MESSAGES (one place, for a second language).
"""
import ast
import itertools
import json
import math
import re
import string

import torch

from .language import translated

# One template per family outcome; the fields are filled by the family that fits.
MESSAGES = translated(__name__) | {
    "shape_axis": "{axis} has {got}{got_is} entries; it should have {want}{want_is}",
    "shape_order": "the sizes are right but the axes are in another order: you gave "
                   "({got_axes}), the answer is ({want_axes})",
    "shape_rank_extra": "it has an extra axis of size {size}{size_is} at position {index} "
                        "(expected {want_rank} axes: {want_axes})",
    "shape_rank_missing": "it lacks the {axis} axis (size {size}); expected {want_rank} axes: "
                          "{want_axes}",
    "shape_rank": "it has {got_rank} axes of sizes {got}; expected {want_rank}: {want_axes}",
    "shape": "{name}: wrong shape ({found}). Expected {want} = {want_axes}, got {got}.",
    "swap": "the values are right but {first} and {second} are swapped (a transpose too many "
            "or too few)",
    "view": "the values are right but laid out as if {first} and {second} had been "
            "exchanged by a view/reshape without the transpose that must go with it",
    "reversed": "the values are right but {axis} runs in reverse order",
    "factors": "the values are right but the {outer} x {inner} entries of {axis} are in the "
               "other order ({outer} blocks of {inner} where {inner} blocks of {outer} are "
               "expected: interleaved instead of tiled, or the reverse; e.g. "
               "repeat_interleave vs repeat, or the order of a reshape)",
    "times": "it is the right answer times {factor:.6g}{factor_is}",
    "plus": "it is the right answer plus {offset:.6g}{offset_is}",
    "shifted": "it is the right answer moved by {k} position{s} along {axis} (off by "
               "{k_word}: entry i holds what belongs at i {sign} {k})",
    # a small count in words ("off by one"), for shifted and runs; a larger one stays a number
    "count_words": {"1": "one", "2": "two", "3": "three"},
    "complement": "it is the complement of the right mask (True/1 exactly where it should be "
                  "False/0): the mask inverted (flipped, as if negated with ~); check which "
                  "value means 'may attend'",
    "diagonal": "the triangle's diagonal is off by {k}: your mask is the right one with "
                "its diagonal moved {direction} by {k} (diagonal={got} where {want} is "
                "right)",
    "localized": "it is right everywhere except at {where} ({count} of {total} entries "
                 "off): look at what your code does differently there",
    "step": "it is what the formula gives when {step}",
    "raised": "{name} raised {kind}: {message}\n(the sizes in it: {named}; called with "
              "tensors of shapes {shapes})",
    "explained": "{name} is wrong: {reason}.",
    # the repair family (checks.repair: the one edit of the student's code with which the
    # check passes); "repair" leads, one clause per kind of edit follows
    "repair": "line {line} of your `{function}`: `{code}` \u2014 with `{after}` in place of "
              "`{before}`{reads} this check passes: {clause}",
    "repair_reads": " (the line then reads `{edited}`)",
    "repair_delete": "line {line} of your `{function}`: `{code}` \u2014 without this line "
                     "this check passes: {clause}",
    "repair_clause": {
        "axis": "the step runs along another axis than it should",
        "number": "another number than the one it should be",
        "unwrap": "the `{step}` step should not be there",
        "transpose": "a transpose is missing",
        "swap": "the operands should be in the other order",
        "operator": "the other operator",
        "unary": "the sign, the complement `~` or the `not` the other way",
        "confusable": "`{after}`, not `{before}`, which is easily confused with it",
        "name": "it reads `{before}` where it should read `{after}`",
        "keyword": "the keyword arguments of that call",
        "delete": "this line should not be there",
    },
    "repair_unwrap_transpose": "a transpose too many",
    "nonfinite": "it holds NaN or inf where the right answer is finite: {count} of {total} "
                 "entries ({kinds}), {where}",
    "nonfinite_region": "all of them in {region}: {covered}",
    "runs": "each run of True along {axis} is {k} position{s} {longer} than it should be "
            "(off by {k_word}: a bound such as p < length written p <= length, or the "
            "reverse)",
    "runs_complement": "it is the complement of the right mask (True where it should be "
                       "False), the mask inverted, and besides each run of True along {axis} is "
                       "{k} position{s} {longer} than in that complement (off by {k_word})",
    "overflow": "a number your code writes does not fit in {dtype}: its finite values end at "
                "-{top:.6g} and {top:.6g}, so {dtype} cannot hold it (torch.finfo({dtype}).min "
                "and .max are the extreme values it can)",
    "singleton_missing": "it lacks {count} axes of size 1, at positions {positions} of "
                         "({want_axes}): its other sizes are right, but without those axes "
                         "it broadcasts along other axes than intended",
    "singleton_extra": "it has {count} extra axes of size 1, at positions {positions}; "
                       "expected ({want_axes})",
    "parameter": "your {function} has no parameter {parameter}, which the exercise's "
                 "signature promises: add it, and use it",
    # fewer_axes, kind (chapter 3)
    "reduced": "it is the right answer {how}: the answer keeps that axis",
    "merged": "it is the right answer with {first} and {second} merged into one axis of "
              "{size} = {first} * {second} entries: keep them apart ({first} and {second} "
              "flattened together, as flatten({axis}) or a reshape that joins axis {axis} with "
              "the next does)",
    "kind": "{what} {outcome} where the exercise documents {documented}",
    "kind_item": " (.item() gives the Python number a one-element tensor holds)",
    "kind_none": " (a return statement is missing, or returns nothing)",
    "steps": "it is what the formula gives when {first}; or when {others} (these give the "
             "same numbers on these inputs)",
    # all_zero, changed_in_place, wrong_state (chapter 5)
    "zeros": "every entry is 0 where the right answer is not: nothing was written into it "
             "(a new tensor, or a new layer's bias, starts at zeros) or it was set to 0",
    "in_place": "it changed {what} in place: {count} of {total} entries differ from what was "
                "passed in",
    "state": "its {quantity} is {got} where it should be {want}{why}",
    "starting_states": "it is right from {right} but not from {wrong}: {detail}",
    "raised_at": "{name} raised {kind}: {message}\n(at {where}\n called with tensors of "
                 "shapes {shapes}{sizes})",
    "raised_sizes": "; the sizes in it: {named}",
    "item_order": "the items are in another order: you returned ({got}), the exercise asks "
                  "for ({want}) in this order",
    "split_axis": "the {axis} axis ({size}) is still split into two axes, {first} x {second}: "
                  "you gave ({got_axes}), the answer is ({want_axes})",
    "raised_where": "\n(at {where})",
    # what an error means (error_reason), for any exercise
    "raised_reason": "\nWhat that error means: {reason}.",
    "raised_plain": "{name} raised {kind}: {message}\n(called with tensors of shapes {shapes})",
    "error_product": "a matrix product A @ B pairs the last axis of A with the "
                     "second-to-last axis of B (the first, for a 2-D B), and here they differ: "
                     "{left}{left_is} against {right}{right_is}",
    "error_product_flat": " (A's other axes flattened into {rows}{rows_is} rows)",
    "error_product_transposed": "; B's last axis has the {left} entries A's last axis has, so "
                                "the product wants B transposed (nn.Linear keeps its weight "
                                "as (out_features, in_features): x @ weight.T)",
    "error_product_batch": "a batched matrix product A @ B needs the same batch size "
                           "({left}{left_is} in A, {right}{right_is} in B) on the axes before "
                           "the last two",
    "error_broadcast": "an entry-by-entry operation (+, -, *, /, a comparison, masked_fill, "
                       "copy_) meets an axis of {left}{left_is} entries and one of "
                       "{right}{right_is} entries at axis {axis} of the result (broadcasting "
                       "aligns the axes from the last; sizes must be equal or 1)",
    "error_keepdim": "; the reduction on that line ({call}) drops the axis it reduces: with "
                     "keepdim=True that axis stays as size 1 and broadcasts back",
    "error_view": "a view/reshape to sizes ({sizes}) needs {want}{want_is} entries but the "
                  "tensor holds {have}{have_is}: one of the sizes asked for is not the one "
                  "the tensor has",
    "error_stride": "a .view() of a tensor whose entries are no longer in that order in memory "
                    "(after a transpose or permute): use .reshape(), or .contiguous().view()",
    "error_axis": "it names axis {got} of a tensor that has only {rank} axes ({low}..{high}): "
                  "that tensor has fewer axes than the code assumes",
    "error_unpack": "that line unpacks {want} sizes (or values) where there are {got}: a "
                    "tensor with {got} axes where the code expects {want}",
    "error_unpack_many": "that line unpacks {want} values where there are more: a tensor "
                         "with more axes than the code expects",
    "error_dtype": "two tensors of different dtypes meet in one operation ({first} and "
                   "{second}): a tensor made with a fixed dtype (torch.tensor, torch.ones, "
                   "torch.zeros, .float(), ...) where it should follow the input's "
                   "(dtype=x.dtype, or .to(x.dtype))",
    "error_bool_mask": "masked_fill takes a bool mask and this one is {dtype}: build it with "
                       "a comparison, or convert it with .bool()",
    "error_permute": "the permute lists {want} axes for a tensor of {got} axes",
    "error_cat": "torch.cat joins tensors along axis {axis}, and their other axes must have "
                 "the same sizes: one has {left}{left_is} entries where another has "
                 "{right}{right_is}",
    "error_stack": "torch.stack needs tensors of one shape; it got {first} and {second}",
    "error_expand": "an axis of {have}{have_is} entries meets a size of {want}{want_is} "
                    "(only an axis of size 1 broadcasts or expands)",
    "error_index": "index {index} on an axis of {size}{size_is} entries (0..{last})",
    "error_none": "a None is used as a tensor (an argument left at its default None, such as "
                  "mask=None, which means 'no mask', or a function that returns nothing)",
    "error_leaf": "it writes in place into a tensor that requires grad (a parameter, or an "
                  "input the check passes with requires_grad=True): compute a new tensor "
                  "instead (x = x.masked_fill(...), not x.masked_fill_(...)); only a "
                  "parameter you mean to change is written in place, inside "
                  "`with torch.no_grad():`",
    "error_bmm": "torch.bmm takes exactly 3-D tensors: @ (torch.matmul) takes any number of "
                 "leading axes",
    "error_rank2": "{call} needs a tensor of at least 2 axes (rows, columns)",
    "error_split": "the split sizes ({sizes}) must add up to the axis's {total}{total_is} "
                   "entries",
    "error_float_size": "{call}() takes whole numbers for sizes and got a float: a size "
                        "computed with / (d_model / num_heads is a float even when it divides); "
                        "compute sizes with //",
    "error_parameter": "a module's parameter ({parameter}) can only be replaced by an "
                       "nn.Parameter: copy the numbers into it with .copy_() inside "
                       "torch.no_grad(), or wrap the tensor in nn.Parameter",
    "error_ambiguous": "an if, and, or, not (or bool()) on a tensor of several entries: "
                       "compare numbers (x.shape[...], .item()), or use .any(), .all(), "
                       "torch.where",
    "error_not_callable": "a {what} is called as if it were a function{shape}",
    "error_shape_call": " (x.shape is a value: x.shape[-1], or x.size(-1))",
    "error_attribute": "the {what} has no attribute {attribute}: a name the exercise's "
                       "object does not have (set in __init__ as self.{attribute} = ..., or "
                       "misspelled)",
    "error_number_attribute":
        "a Python {what} has no attribute {attribute}: that value is a plain Python number, not "
        "a tensor (a shape entry such as x.shape[-1], .item(), float(), int() or math.* made "
        "it one); keep the tensor where its methods are needed (call .item() only on the value "
        "you return), or compute with the number itself (math.sqrt(n), n ** 0.5)",
    "error_argument": "{call}() was called without its argument {argument}{axis}",
    "error_argument_dim": " (the axis it works along, e.g. dim=-1 for the keys)",
    "error_cast": "an operation writes floats into an integer tensor (torch.arange and "
                  "torch.tensor of ints give int64): make that tensor a float one "
                  "(dtype=x.dtype), or compute out of place",
    "error_index_kind": "a tensor used as an index must hold integers or bools; this one "
                        "holds floats",
    "error_integer_mean": "the mean of an integer or bool tensor: convert it first "
                          "(.float(), or .to(x.dtype))",
    "error_max_axes": "{call}() takes one axis (dim=an int); amax/amin take several "
                      "(dim=(0, 2))",
    "error_integer_grad": "only a float tensor can require gradients; this one holds integers",
    "error_einsum": "in the einsum, the letter {letter} stands for axes of different sizes: "
                    "{left}{left_is} in operand {operand} and {right}{right_is} before it",
    "error_fill_value": "masked_fill takes one number (or a 0-d tensor) as its fill value; "
                        "this one has {rank} axes",
    "error_scalar": "a tensor of several entries turned into one Python number (int(), "
                    "float(), .item())",
    "earlier": "the {what} it is made from are already wrong: {reason}",
    # permuted (any exercise)
    "permuted": "the values are right but its axes are in another order: you gave "
                "({got_axes}), the answer is ({want_axes}) (a transpose or permute too many "
                "or too few)",
    "permuted_view": "the values are right but in another layout: they are the answer's "
                     "entries read in the axis order ({order}) and put into shape {got} (a "
                     "view/reshape without the transpose or permute that must go with it)",
    "reduced_many": "it is the right answer {how}: the answer keeps those axes",
    # offset_along (any exercise)
    "offset_along": "it is the right answer plus an offset that varies only along {axis} "
                    "(the same vector added at every other index){like}: a bias added once "
                    "too often or left out, or the wrong vector added",
    "offset_like": " ({times}the vector {name})",
    # rescaled_lines, indices_permuted (any exercise)
    "rescaled_lines": "each line of entries along {axis} is the right one times its own "
                      "factor (from {low:.3g} to {high:.3g}, one per index of the other axes): "
                      "the entries of a line are in the right proportions but the line is "
                      "scaled by another number, as when a normalisation along {axis} (a "
                      "division by its sum, maximum or norm) is left out, runs over other "
                      "entries, or divides by a sum that is not the one of the numerator",
    "indices_permuted": "the values are right but the indices of {axis} are in another order: "
                        "{moves} (the blocks or items of {axis} put back in the wrong order)",
    # reshaped_in_place (any exercise)
    "in_place_shape": "it changed {what} in place, to another shape: {got} where it was "
                      "{want} ({words}; a transpose_, resize_ or an in-place view)",
    # unrepeatable (any exercise)
    "unrepeatable": "the same call on the same inputs gave other {what} the second time: "
                    "a random step runs where the exercise has none, or in eval mode (a "
                    "dropout: F.dropout's training= is True unless given; nn.Dropout follows "
                    ".train() and .eval())",
    # a None used as an object with a length (error_reason)
    "error_none_object": "a None is used where an object with a length is expected (len() of "
                         "it): an argument left at its default None that must first be "
                         "replaced by a fresh object of its own, as a cache=None becomes a "
                         "fresh, empty cache (KVCache()) for the first call, or a function "
                         "that returns nothing",
    # which name is None on the student's line (error_reason)
    "error_none_name": "; on that line, `{name}` is None",
    "error_none_names": "; on that line, one of {names} is None",
    # triangle_kind, more_error_reasons (chapter 4)
    "triangle": "it is {got_article} {got} triangle where {want_article} {want} one is right: "
                "your mask is True where {rule_got}, the answer where {rule_want} (j the "
                "{col} index, i the {row} index; tril keeps the entries on and below a "
                "diagonal, triu those on and above it)",
    "error_too_many_indices": "it indexes more axes than the tensor has ({rank}): a tensor "
                              "with fewer axes than the code assumes (e.g. (B, Lk) where "
                              "(B, 1, 1, Lk) was expected); handle each documented shape",
    "error_bool_arithmetic": "- or 1 - x on a bool tensor: PyTorch has no arithmetic on "
                             "bools; negate a bool mask with ~mask (or torch.logical_not)",
    # one_minus (chapter 5)
    "one_minus": "it is 1 minus the right answer (a distance or a complement, 1 - x, where "
                 "the quantity x itself is asked for)",
    # constant (a count off by one, any chapter)
    "count_off_by_one": " = {num}/{den}: as if a sum were divided by {den} where it should be "
                        "divided by {num} (a count off by one: a mean over {den} items where "
                        "{num} are averaged, or the other way round)",
    # constant (a factor that is a count of entries, any chapter)
    "count_summed": " (a whole number: as if {count} entries were summed where their mean is "
                    "asked for, i.e. summed instead of averaged: the division by the count of "
                    "the averaged entries is left out, or the mean runs over fewer axes than "
                    "the sum)",
    "count_averaged": " = 1/{count}: as if {count} entries were averaged where their sum is "
                      "asked for (a mean, a division by their count, where the sum itself is "
                      "right)",
    # error_reason: a tuple used as a tensor; a view's size that is none of the call's
    "error_tuple_attribute": "a {what} has no .{attribute}: a {what} is used where one tensor "
                             "is expected; a function that returns several values, such as "
                             "(output, weights), gives a tuple: unpack it first (output, "
                             "weights = f(...))",
    "error_view_unknown": "; {sizes} is none of this call's sizes (no quantity of the exercise "
                          "nor a product of them): a size taken from elsewhere than the "
                          "tensor itself (a notebook variable, a fixed number); read every "
                          "size from the input's .shape",
    "error_view_in_place_of": "; with {fits}{fits_is} in place of {size}{size_is} (size "
                              "{axis} of the view) the sizes fit: that size was read from "
                              "another tensor or quantity than the one reshaped (read each "
                              "tensor's sizes from its own .shape)",
    # error_reason: an error the student's own raise or assert gave (the check's inputs are
    # ones the exercise allows)
    "error_own_refusal": "the error comes from a raise (or an assert) in your own code: it "
                         "refused the inputs of this call, which are valid ones for the "
                         "exercise, so the condition that guards it tests the wrong sizes or "
                         "tensors (compare it with the sizes the exercise says must agree)",
    # error_cause: the likely mistake behind an error, from its sizes and the student's line
    "raised_cause": "\nLikely cause: {cause}.",
    "cause_untransposed": "`{operand}` enters the product untransposed: its second-to-last "
                          "axis has {right}{right_is} entries where A's last has "
                          "{left}{left_is}; if its last axis is the one of {left} entries (as "
                          "a key (..., Lk, d_k) has d_k last), it is not transposed before "
                          "the product: {operand}.transpose(-2, -1) swaps its last two axes",
    "cause_transposed_axes": "`{operand}` swaps axes {first} and {second}, which are the "
                             "last two only of a tensor of {rank} axes, while A @ B pairs A's "
                             "last axis with B's second-to-last whatever the axes before them "
                             "(B^T of a batched B is B.transpose(-2, -1))",
    "cause_transpose_all": "`{operand}` uses .T, which reverses all the axes of a tensor of "
                           "more than 2 axes (B^T of a batched B is B.transpose(-2, -1), or "
                           "B.mT), or a transpose where none is needed",
    "cause_transposed_extra": "`{operand}` is transposed before the product and then its "
                              "second-to-last axis has {right}{right_is} entries where "
                              "{left}{left_is} are needed: a transpose too many (or the "
                              "operands in the other order)",
    "cause_layer": "`{layer}` takes {right}{right_is} input features (the in_features it was "
                   "built with) and the tensor it gets has {left}{left_is} on its last axis",
    "cause_repeat": "the key/value heads were not repeated to num_heads: {kv} = num_kv_heads "
                    "key/value heads meet {heads} = num_heads query heads; repeat each "
                    "key/value head for its group of query heads (repeat_kv) before the "
                    "product",
    "cause_heads": "{small} = head_dim is one head's share of {big} = {big_name} = num_heads x "
                   "head_dim: a tensor whose heads are not merged back into {big_name} "
                   "features (move the head axis next to head_dim, transpose(1, 2), then "
                   "reshape to (B, L, {big_name})) where all {big_name} features are "
                   "expected, or one not split into heads (split_heads) where a head's "
                   "head_dim features are expected",
    "cause_split": "{big}{big_is} = {factor}{factor_is} x {small}{small_is}: an axis of "
                   "{big} entries still split into two axes ({factor} x {small}) where one is "
                   "expected, or not split where {small} entries are (merge or split it, with "
                   "a transpose first where the two axes are not next to each other)",
    "cause_product_batch": "A @ B broadcasts the axes before its last two, and there an axis "
                           "of {left}{left_is} meets one of {right}{right_is}: one operand "
                           "has an axis more or fewer than the product assumes (two axes not "
                           "flattened or merged into one, or not split into heads), or "
                           "axes transposed that are not its last two",
    "cause_mask": "the mask's shape: its axes line up with the scores' from the last, so a "
                  "mask that lacks a size-1 axis puts one of its axes against another of the "
                  "scores' (here {left}{left_is} meets {right}{right_is}); the mask is not "
                  "broadcast over the heads (or the queries): give it its size-1 axes (a "
                  "(B, Lk) mask becomes (B, 1, 1, Lk) with mask[:, None, None, :]) or build "
                  "it with the documented shape",
    "cause_missing_axis": "broadcasting lines the axes up from the last, so an axis of "
                          "{left}{left_is} meeting one of {right}{right_is} means one tensor "
                          "has an axis fewer or more than the other, or its axes in another "
                          "order (a tensor not split into heads, a reduction without "
                          "keepdim=True, a mask without its size-1 axes, a transpose too "
                          "many or too few), or that the two differ in size on that axis (a "
                          "step that turns {left} entries into {right}, or back, left out or "
                          "done in another order)",
    "cause_outer": "if both are vectors (one entry per {left}{left_is}, one per "
                   "{right}{right_is}), a table of every pair needs a new axis on one of "
                   "them: a[:, None] * b[None, :] (an outer product), not a * b",
    "cause_expand_order": "expand keeps every axis the tensor has and grows only its size-1 "
                          "axes (here axis {ones}): the target sizes ({target}) are in "
                          "another order than the tensor's axes; in the tensor's order they "
                          "are ({fixed})",
    "cause_view_grow": "a view/reshape only rearranges the entries a tensor has: `{tensor}` "
                       "has {have} and the shape of `{other}` holds {times} times as many; "
                       "to use `{tensor}` with a tensor of that shape, let broadcasting "
                       "expand it (the operation lines its axes up) or use "
                       "{tensor}.expand({other}.shape)",
    "cause_float_index": "a slice or an index that is a float: a size computed with / "
                         "(x.shape[-1] / 2 is a float even when it divides); compute it "
                         "with // (integer division)",
    "cause_second_axis": "{call}() takes its axes as one tuple: {call}(({first}, {second})); "
                         "{call}({first}, {second}) reads the second number as keepdim",
    "cause_axis_from_front": "`{call}` counts axis {got} from the front, and the tensor it "
                             "gets has {rank} axes: count the axes the exercise names from "
                             "the end (dim=-1 for the last, -2 for the one before) so that "
                             "the code works for any number of leading axes, or the tensor "
                             "has fewer axes than the line assumes (not split into heads, or "
                             "an axis reduced or squeezed away)",
    "cause_index_end": "index {index} is one past the last of {size}{size_is} entries "
                       "(0..{last}): an off-by-one (a range or a position that starts at 1 or "
                       "runs to the length itself, i + 1 at the last position)",
    "cause_index_beyond": "index {index} is beyond the {size}{size_is} entries of that axis: "
                          "a position or a size taken from another quantity than the one "
                          "of that axis, or an index on the wrong axis",
    "cause_norm_size": "the norm was built for {built}{built_is} features and gets a tensor "
                       "whose last axis has {got}{got_is}: build it with the size of the "
                       "tensor it normalises (nn.RMSNorm({got_name}) / nn.LayerNorm("
                       "{got_name})), or it is applied to another tensor than the one meant",
    "cause_unpack_shape": "the line unpacks `{tensor}.shape` into {want} names and `{tensor}` "
                          "has {got} axes: it is not the tensor of the shape the line "
                          "assumes (an axis not yet split or already merged, heads not split, "
                          "a mask of fewer axes, or the arguments in another order)",


    # wrong_shape's likely causes, float32_rounding (chapters 2-3, any exercise)
    "shape_swap_cause": " ({first} and {second} exchanged: a transpose({i}, {j}) too many or "
                        "too few, or a view/reshape given their sizes in the other order)",
    "shape_recut": "; the same {count} entries in other sizes, ({got_axes}) where the "
                   "answer is ({want_axes}): one way to get this is a view/reshape given its "
                   "sizes in another order than the tensor's axes (sizes unpacked from .shape "
                   "in the wrong order), another is axes merged or joined (reshape, flatten, "
                   "cat) that the answer keeps apart (a transpose or permute must bring the "
                   "right axes together first)",
    "float32_rounding": "it differs from the right answer only by about float32's rounding "
                        "(largest error {error:.2g} of the largest entry) in this float64 "
                        "test: a step computes in float32, such as a tensor made without a "
                        "dtype (torch.zeros, torch.ones, torch.full, torch.tensor give float32 "
                        "unless told) or a .float(); make every tensor follow the input's "
                        "dtype (dtype=x.dtype, torch.zeros_like)",


    # step_nonfinite (any exercise)
    "step_nonfinite": "it is what the formula gives when {step}: the same NaN or inf at the "
                      "same {count} of {total} entries, and the same values at the others",
    "nonfinite_step": "{where}; {step}",


    # part_of (any exercise)
    "part_of": "it holds only {which} of the {total} entries of {axis}, with the right values "
               "there: the other entries of that axis are left out (a slice or an index "
               "too many, or a loop that keeps one item)",
    "part_first": "the first {count}",
    "part_last": "the last {count}",
    # Formula's sentences (formulas.py words each step's description and label)
    "formula_left_out": "the {name} step is left out",
    "formula_left_out_meaning": "the {name} step is left out: {meaning}",
    "formula_changed": "the {name} step {description}",
    "formula_pair": "{first}, and {second}",
    "formula_input_swap": "the input {used} is used in place of {meant}",
    "steps_or": "; or when ",
    # the pieces the families build their sentences from: axes, indices, directions, joins
    "axis_number": "axis {index}",
    "axis_named": "the {name} axis",
    "and_joiner": " and ",
    "index_one": "index {index}{end} of {name}",
    "index_first_end": " (the first)",
    "index_last_end": " (the last)",
    "indices_block": "indices {first}..{last} of {name} (a block of {count})",
    "indices_list": "indices {shown} of {name}",
    "index_moved": "index {index} holds what belongs at {belongs}",
    "diagonal_up": "up",
    "diagonal_down": "down",
    "runs_longer": "longer",
    "runs_shorter": "shorter",
    "triangle_lower": "lower",
    "triangle_upper": "upper",
    "reduced_mean": "averaged over {axis}",
    "reduced_sum": "summed over {axis}",
    "reduced_first": "at the first index of {axis}",
    "reduced_last": "at the last index of {axis}",
    "nonfinite_every": "every entry there ({inside})",
    "nonfinite_some": "{count} of the {inside} entries there",
    "nonfinite_at": "at {parts}",
    "nonfinite_spread": "spread along every axis",
    "described_scalar": "a 0-d Tensor",
    "described_tensor": "a Tensor of shape {shape}",
    "described_items": "a {kind} of {count} items",
    "described_a": "a {kind} ({value!r})",
    "described_an": "an {kind} ({value!r})",
    "described_a_kind": "a {kind}",
    "described_an_kind": "an {kind}",
    "kind_raised": "raised {raised}",
    "kind_returned": "returned {described}",
    "kind_is": "is {described}",
    "kind_raised_nothing": "raised nothing",
    "kind_returned_only": "returned {described} and raised nothing",
    "view_multiple": "a multiple of {size}",
    "unpack_more": "more than {want}",
    "offset_times": "{times:.6g} times ",


    # error_reason, error_cause: sentences that fit the student's line (issue 20, i20fix)
    "error_product_orientation": "; B's last axis has the {left} entries A's last axis has, "
                                 "so B is in the other orientation: a transpose missing "
                                 "(x @ weight.T for an nn.Linear weight), or one too many",
    "error_product_transposed_extra": "; B's last axis has the {left} entries A's last axis "
                                      "has, and the line transposes B (`{operand}`): B is "
                                      "already in the orientation the product wants, so that "
                                      "transpose is one too many (or B was transposed before)",
    "error_leaf_parameter": "it writes in place into `{tensor}`, a parameter (it requires "
                            "grad): a parameter you mean to change is written inside `with "
                            "torch.no_grad():` (e.g. {tensor}.copy_(new_values) there)",
    "error_leaf_view": "it writes in place into `{tensor}`, a view of a tensor that requires "
                       "grad: of a parameter (change a parameter's values inside `with "
                       "torch.no_grad():`, e.g. {tensor}.copy_(new_values) there) or of an "
                       "argument the check passes with requires_grad=True (your function must "
                       "not change its inputs: compute a new tensor instead)",
    "error_leaf_argument": "it writes in place into `{tensor}`, a tensor that requires grad: "
                           "an argument the check passes with requires_grad=True (or a tensor "
                           "that is one of the arguments, not a new one); your function must "
                           "not change its inputs: compute a new tensor instead ({tensor} = "
                           "{tensor}.masked_fill(...), torch.where(...), not {tensor}[...] = "
                           "... or {tensor}.masked_fill_(...))",
    "cause_size_differs": "the two tensors on that line differ in size on that axis, "
                          "{left}{left_is} against {right}{right_is} (broadcasting lines the "
                          "axes up from the last): one way to get this is a step that turns "
                          "{left} entries into {right}, or back, left out or done in another "
                          "order (a projection, a split into heads or a merge), another is one "
                          "tensor's axes in another order (a transpose too many or too few, a "
                          "view without its transpose); only if one of them has fewer axes "
                          "than the other, an axis missing (not split into heads, a mask "
                          "without its size-1 axes)",
    "cause_index_other_axis": "; or indices meant for a longer axis used on this one (x[i] "
                              "indexes the first axis, x[:, i] the second)",
    "cause_indexed_away": "`{expression}` indexes with an integer, which removes that axis (a "
                          "slice such as -1: keeps it, as size 1): the tensor passed on has "
                          "one axis fewer than the code it goes to expects",
    "error_library_keyword": "{function}() is PyTorch's and takes no {keyword}=: that keyword "
                             "belongs to another call of the line (dtype= and device= go to the "
                             "call that creates the tensor, e.g. torch.ones(..., dtype=...))",
    "error_too_many_arguments": "{call}() takes {want} positional argument(s) and the line "
                                "gives it {got}: it is called with arguments its definition "
                                "does not have (read its signature: what it reads from its "
                                "input's shape is not passed)",
    "error_join_list": "torch.{call} takes one list (or tuple) of tensors, then the axis: "
                       "torch.{call}([a, b], dim=...), not torch.{call}(a, b, dim=...)",
    "error_join_ranks": "torch.cat joins tensors of the same number of axes, and here one has "
                        "{first} and another {second}: one of them lost an axis (a reduction "
                        "without keepdim=True, an integer index) or lacks one",
    "error_join_dropped": "; on that line `{call}` drops the axis it reduces: keepdim=True "
                          "keeps it as size 1",
    "error_target_size": "cross_entropy takes the classes on axis 1: logits (N, C) with "
                         "targets (N,), or (N, C, L) with (N, L); here the targets are "
                         "[{got}] where [{want}] is expected: logits (B, L, V) must be "
                         "flattened to (B * L, V) with their targets to (B * L,) (flatten(0, "
                         "1), flatten()), or transposed to (B, V, L)",
    "error_target_class": "a target class {target} is not below the number of classes (the "
                          "logits' axis 1): the targets or the logits are not the ones meant",
    "error_target_ignored": "a target {target}, which is no class: -100 is cross_entropy's "
                            "default ignore_index, the value that marks positions to skip; "
                            "with another ignore_index those positions are read as classes "
                            "(leave ignore_index at its default, or give the value the "
                            "targets use)",
    "cause_heads_operand": "; here `{operand}` brings all {big}{big_is} entries: where it is "
                           "meant for one head, take that head's block of it "
                           "({operand}[i * head_dim:(i + 1) * head_dim], as for the head's rows "
                           "of a weight)",
    "cause_inner": "the operation that failed is inside `{call}`, which this line calls (there "
                   "{left}{left_is} met {right}{right_is}): a tensor given to it is not in the "
                   "shape it documents; one way to get this is its axes in another order (a "
                   "transpose once too often or missing, a view without its transpose), "
                   "another a tensor not split into heads or not merged: compare each argument "
                   "with its docstring",
    "error_positional": "{call}() takes at most {most} positional arguments and the line gives "
                        "it {got}: the others go by keyword ({keywords}, as its forms above "
                        "list them after the *)",
    # traced (any exercise with a formula): where the student's code departs from it
    "trace_departs": "your code agrees with the formula up to its {last} step (at {place}{code}); "
                     "the {step} step is where it departs",
    "trace_returned": "your code computes every step of the formula, the last ({last}) at "
                      "{place}{code}, but what it returns is another value",
    "trace_code": ": `{code}`",
    "trace_at": "; the first value after that which is none of the formula's is computed at "
                "{place}{code}",
    "trace_how": " (that value, against the {step} step's: {reason})",
    "trace_adds": "it is that value plus {what}, which the formula does not add (a residual, "
                  "or a term too many)",
    "trace_input": "the input {name}",
    "trace_step_value": "the value of the {step} step",
    "trace_step_part": "the {key} of the {step} step",
    "trace_function": "it is {function} of that value, which the formula does not apply",
    "trace_square": "it is that value squared (** 2), which the formula does not do",
    "trace_minus": "it is that value with its {reduction} along {axis} (dim={dim}) subtracted, "
                   "which the formula does not do",
    "trace_divided": "it is that value divided by its {reduction} along {axis} (dim={dim}), "
                     "which the formula does not do",
    "trace_linear": "it is that value passed through {weight} once more (a projection applied "
                    "again)",
    # the reductions trace_minus and trace_divided name
    "trace_maximum": "maximum",
    "trace_minimum": "minimum",
    "trace_mean": "mean",
    "trace_sum": "sum",
    "trace_norm": "norm",
    "step_nonfinite_or": "; or when ",
    # the likely cause of an error from the shapes on the student's raising line
    # (error_cause's _cause_line_shapes; checks.operations.line_shapes records them)
    "raised_line_shapes": "\n(the tensors on that line: {named})",
    "shape_of": "`{expression}` {shape}",
    "cause_same_shape": "both operands of the matrix product have the shape {shape}: a "
                        "matrix product of two tensors of one shape (..., n, m) with n != m "
                        "needs the second transposed, and where an entry-by-entry product "
                        "(`*`, which keeps that shape) is meant, `@` is the wrong operator",
    "cause_operand_order": "{right} @ {left} fits where {left} @ {right} does not: the "
                           "operands are likely in the other order (a matrix product does "
                           "not commute)",
    "cause_indexed_operand": "; `{operand}` is taken from {whole}: if those axes are not in "
                             "the order meant, the reshape or view that made `{whole_name}` "
                             "has its sizes in another order",
    "cause_extra_unit_axis": "{longer} has an axis of size 1 that {shorter} lacks: one way to "
                             "get this is an index with a slice (x[:, -1:]) that keeps its "
                             "axis where an integer index (x[:, -1]) removes it, or "
                             "keepdim=True / unsqueeze once too often{seen}",
    "cause_seen_unit_axis": " (on that line {named} has that size-1 axis already)",
    "cause_operand_transposed": "{first} has its last two axes in the other order than "
                                "{second}: one of them is likely transposed (or built with "
                                "its sizes in the other order)",
    "cause_operand_times": "{big} has {times} times the entries of {small} on axis {axis} "
                           "({size}{size_is} against {other}{other_is}): one way to get this "
                           "is a tensor cut into {times} along another axis than this one "
                           "(chunk and split cut axis 0 unless given dim=)",
    "cause_view_times": "{tensor} holds {times} times the {want} entries the view asks for: "
                        "{fits} (one way to get this: a length or a range taken as a "
                        "quantity where that quantity / {times} is meant)",
    "view_fits": "its axis of {size}{size_is} entries would fit with {fits} = {name} / {times}",
    "or": ", or ",
    "cause_unpack_axes": "{tensor} has {rank} axes where the line unpacks {want} names",
    "cause_merged_axes": "{tensor} has {rank} axes: its axis of {size}{size_is} entries "
                         "holds those quantities flattened (merged) into one where the line "
                         "expects them apart (a flatten or reshape that starts an axis too "
                         "early, or merges more than meant)",
    "merged_from": " = {sizes}, axes {first}..{last} of {tensor}",
    "cause_rows_differ": "{first} gives the {left} rows and {second} the {right}: they differ "
                         "on axis {axis} ({one} against {two}){by_one}",
    "cause_rows_by_one": ", by one position: likely one of them is shifted or cut by one "
                         "position and the other is not (x[:, :-1] against x[:, 1:])",
    # the trace's data flow (i20shape): the wrong value a departing line reads, and the line
    # that made a wrong shape, with what it did to the shape
    "trace_read_by": "; the line after it that reads it is {place}{code}",
    "trace_how_input": " (that value, against the input {step}: {reason})",
    "shape_merged_axes": "{first} and {second} are merged into one axis of {size} = {first} * "
                         "{second} entries (expected {want_rank} axes: {want_axes}): a "
                         "flatten/reshape/view that merges them, or torch.cat where torch.stack "
                         "makes a new axis",
    "shape_made": ". Your code makes that shape at {place}{code}",
    "shape_made_from": " (from a tensor of shape ({axes}))",
    "shape_reduced": ", which reduces {axis} (dim={dim}) of a ({axes}) tensor; the answer is "
                     "that tensor with {want_axis} (dim={want_dim}) reduced instead: likely the "
                     "reduction runs over the wrong axis",
    "shape_removes": ", which removes {axis} (dim={dim}) of a ({axes}) tensor (an integer "
                     "index, or a reduction); the answer is that tensor without {want_axis} "
                     "(dim={want_dim}) instead: likely it runs over the wrong axis",
    "shape_merges": ", which merges {first} and {second} of a ({axes}) tensor into one axis",
    "shape_merges_other": "; the answer merges {first} and {second} (likely a transpose or "
                          "permute missing before the merge, or flatten given other axes)",
    "shape_merges_apart": "; the answer keeps them apart",
    "shape_joins": ", which joins {count} tensors of shape ({axes}) along {axis} (torch.cat); "
                   "the answer holds them along a new axis at position {index} (torch.stack(..., "
                   "dim={index}))",
    "shape_joins_other": ", which joins {count} tensors of shape ({axes}) along {axis}; the "
                         "answer joins them along {want_axis}",
    "shape_repeats": ", which repeats {axis} {times} times ({size} to {got} entries: a repeat, "
                     "repeat_interleave, expand or cat); the answer has {want}{want_is} there",
    "shape_repeats_other": ", which repeats {axis} ({times} x {size} entries) of a ({axes}) "
                           "tensor; the answer repeats {want_axis} instead",
    "shape_singletons": ", which removes {removed} of the size-1 axes of a ({axes}) tensor; "
                        "the answer removes {want_removed} (index or squeeze each of them)",
    "shape_singleton_added": ", which adds a size-1 axis to a ({axes}) tensor (an unsqueeze, "
                             "None index or keepdim=True too many)",
    "shape_splits": ", which splits {axis} of a ({axes}) tensor into {first} x {second}",
    "shape_splits_order": "; the answer has the axes in the order ({want_axes}): likely the "
                          "transpose or permute that goes with the split is missing or moves "
                          "other axes",
    "shape_reorders": ", which puts the axes of a ({axes}) tensor in the order ({got_axes}); "
                      "the answer's order is ({want_axes})",
    "shape_broadcast": ", which broadcasts a ({axes}) tensor against one of {rank} axes "
                       "({other_axes}){made}: that one has more axes than the answer",
    "shape_broadcast_made": ", made at {place}{code}",
    "shape_broadcast_order": ", which combines a ({first}) and a ({second}) tensor entry by "
                             "entry: broadcasting lines their axes up from the last, so the "
                             "result is ({got_axes}) where the answer has ({want_axes}) (likely "
                             "the size-1 axis, None or unsqueeze, on the other tensor)",
}

# quantities that follow from the check's parameters: name -> (function of dims, needs)
DERIVED = (
    ("head_dim", lambda d: d["d_model"] // d["num_heads"], ("d_model", "num_heads")),
    ("d_model", lambda d: d["num_heads"] * d["head_dim"], ("num_heads", "head_dim")),
    ("groups", lambda d: d["num_heads"] // d["num_kv_heads"], ("num_heads", "num_kv_heads")),
    ("Lq", lambda d: d["L"], ("L",)),
    ("Lk", lambda d: d["L"], ("L",)),
)
# parameters of a check that are no sizes
NOT_SIZES = {"seed", "magnitude", "offset", "start", "lr", "p", "steps", "num_tokens_seen"}


def named_dims(arguments):
    """{name: size} of the exercise's quantities from a check's bound arguments: every
    int parameter (not a seed, a bool or a non-size), each entry of a tuple of sizes
    ("batch[0]" ...; a 1-tuple is plain "batch"), and DERIVED ones where they divide."""
    dims = {}
    for name, value in arguments.items():
        if name in NOT_SIZES or isinstance(value, bool):
            continue
        if isinstance(value, int) and value > 0:
            dims[name] = value
        elif (isinstance(value, tuple) and value and name in ("batch", "shape", "lengths")
              and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            if len(value) == 1:
                dims[name] = value[0]
            else:
                dims.update({f"{name}[{i}]": v for i, v in enumerate(value)})
    for name, rule, needs in DERIVED:
        if name not in dims and all(n in dims for n in needs):
            try:
                value = rule(dims)
            except ZeroDivisionError:
                continue
            if value > 0:
                dims[name] = value
    return dims


def _quantity(size, dims):
    """" = num_heads" (or " = Lq = Lk") for a size some quantities have, else ""."""
    found = [name for name, value in dims.items() if value == size]
    return (" = " + " = ".join(found[:3])) if found else ""


def _sizes_text(sizes, dims, between=", "):
    """"4 = num_heads, 3 = head_dim": sizes, each named by its quantity (_quantity)."""
    return between.join(f"{size}{_quantity(size, dims)}" for size in sizes)


_ORDINAL_SLOT = re.compile(r"第\s*\{\}\s*个?|\{\}")


def axis_names(shape, dims, axes=None):
    """A name per axis of `shape`: `axes` where given (a tuple or "(B, L, D)"), else the
    quantity of that size, each used once in the order of `dims` (the check's parameters
    come in the order of its tensors' axes), else "axis k"."""
    if isinstance(axes, str):
        axes = [a.strip() for a in axes.strip("()").split(",")]
    if axes and len(axes) == len(shape) and all(a and a != "..." for a in axes):
        # ("head {} of the pruned module": "head of the pruned module", one space; the
        # Chinese ordinal "第 {} 个头" loses its "第 个" with the number: "头")
        return [" ".join(_ORDINAL_SLOT.sub("", str(a)).split()) or numbered_axis(k)
                for k, a in enumerate(axes)]
    names, used = [], set()
    for k, size in enumerate(shape):
        found = [n for n, v in dims.items() if v == size and n not in used]
        if found:
            used.add(found[0])
            names.append(found[0])
        else:
            names.append(numbered_axis(k))
    return names


def numbered_axis(k):
    """"axis k", in the language of now: the name of an axis no quantity names."""
    return MESSAGES["axis_number"].format(index=k)


def _axis_label(name):
    """"the L axis" for a quantity's name; a numbered axis ("axis 2 ...") as it is."""
    numbered = re.escape(MESSAGES["axis_number"]).replace(re.escape("{index}"), r"-?\d+")
    return name if re.match(numbered, name) else MESSAGES["axis_named"].format(name=name)


# ---------------------------------------------------------------------------------- shapes

def wrong_shape(got, want, dims, axes=None):
    """The sentence that names a wrong shape: got, want are tuples of sizes."""
    got, want = tuple(got), tuple(want)
    if got == want:
        return None
    want_names = axis_names(want, dims, axes)
    want_axes = ", ".join(want_names)
    if len(got) == len(want):
        if sorted(got) == sorted(want):
            return MESSAGES["shape_order"].format(
                got_axes=", ".join(axis_names(got, dims)),
                want_axes=want_axes) + _swap_cause(got, want, want_names)
        parts = [MESSAGES["shape_axis"].format(
            axis=_axis_label(want_names[k]), got=g, got_is=_quantity(g, dims), want=w,
            want_is=_quantity(w, dims)) for k, (g, w) in enumerate(zip(got, want)) if g != w]
        return "; ".join(parts) + _recut(got, want, want_names, dims)
    if len(got) == len(want) + 1:
        for index in range(len(got)):
            if got[:index] + got[index + 1:] == want:
                size = got[index]
                return MESSAGES["shape_rank_extra"].format(
                    size=size, size_is=_quantity(size, dims), index=index,
                    want_rank=len(want), want_axes=want_axes)
    if len(got) + 1 == len(want):
        for index in range(len(want)):
            if want[:index] + want[index + 1:] == got:
                return MESSAGES["shape_rank_missing"].format(
                    axis=want_names[index], size=want[index], want_rank=len(want),
                    want_axes=want_axes)
    unmerged = (split_axis(got, want, dims, axes) or singleton_axes(got, want, dims, axes)
                or _merged_axes(got, want, want_names))
    if unmerged:
        return unmerged
    return MESSAGES["shape_rank"].format(got_rank=len(got), got=got, want_rank=len(want),
                                         want_axes=want_axes)


def _swap_cause(got, want, want_names):
    """" (L and num_heads exchanged: a transpose(1, 2) ...)" where exchanging two axes of
    `want` gives `got` (the first such pair), else ""."""
    for i, j in itertools.combinations(range(len(want)), 2):
        swapped = list(want)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        if want[i] != want[j] and tuple(swapped) == tuple(got):
            return MESSAGES["shape_swap_cause"].format(first=want_names[i],
                                                       second=want_names[j], i=i, j=j)
    return ""


def _recut(got, want, want_names, dims):
    """"; the same N entries cut into other sizes ..." where `got` holds as many entries as
    `want` (each size of `got` named by a quantity or a product of them), else ""."""
    if math.prod(got) != math.prod(want):
        return ""
    named = []
    for size in got:
        label = _product_name(size, dims).partition(" = ")[2].partition(" = ")[0]
        named.append(label or str(size))
    return MESSAGES["shape_recut"].format(count=math.prod(got), got_axes=", ".join(named),
                                          want_axes=", ".join(want_names))


# --------------------------------------------------------------------------------- layouts

def _factor_pairs(size, dims, avoid=()):
    """(outer, inner, outer name, inner name) with outer * inner = size, one of them a named
    quantity (both > 1). avoid: the names of the tensor's other axes, which a factor of this
    axis is named by only when no other quantity has its size (a (batch, num_heads, ...)
    tensor's num_heads = num_kv_heads * groups, not batch * head_dim)."""
    pairs = []
    ordered = sorted(dims.items(), key=lambda item: item[0] in avoid)
    for name, value in ordered:
        if 1 < value < size and size % value == 0:
            other = size // value
            other_name = next((n for n, v in ordered if v == other), str(other))
            pairs += [(value, other, name, other_name), (other, value, other_name, name)]
    seen, unique = set(), []
    for pair in pairs:
        if pair[:2] not in seen:
            seen.add(pair[:2])
            unique.append(pair)
    return unique


def other_layout(actual, expected, same, dims, axes=None):
    """The layout family: `actual` holds `expected`'s values in another arrangement of the
    same shape: two axes swapped, one axis reversed, one axis's factors in the other order
    (interleaved vs tiled), or two axes exchanged by a reshape without a transpose.
    same(a, b): whether two tensors of one shape agree within the check's tolerance."""
    shape = tuple(expected.shape)
    if tuple(actual.shape) != shape or expected.numel() < 2:
        return None
    names = axis_names(shape, dims, axes)
    rank = len(shape)
    for i, j in itertools.combinations(range(rank), 2):
        if shape[i] == shape[j] and shape[i] > 1 and same(actual, expected.transpose(i, j)):
            return MESSAGES["swap"].format(first=_axis_label(names[i]),
                                           second=_axis_label(names[j]))
    for i in range(rank):
        if shape[i] > 1 and same(actual, expected.flip(i)):
            return MESSAGES["reversed"].format(axis=_axis_label(names[i]))
    for i in range(rank):
        for outer, inner, outer_name, inner_name in _factor_pairs(
                shape[i], dims, names[:i] + names[i + 1:]):
            fine = expected.reshape(*shape[:i], outer, inner, *shape[i + 1:])
            if same(actual, fine.transpose(i, i + 1).reshape(shape)):
                # actual holds `inner` blocks of `outer` entries: the template's outer
                return MESSAGES["factors"].format(outer=inner_name, inner=outer_name,
                                                  axis=_axis_label(names[i]))
    # a view that exchanges two axes (possibly factors of one axis split by the view)
    splits = [(None, shape, names)]
    for i in range(rank):
        for outer, inner, outer_name, inner_name in _factor_pairs(
                shape[i], dims, names[:i] + names[i + 1:]):
            splits.append((i, (*shape[:i], outer, inner, *shape[i + 1:]),
                           names[:i] + [outer_name, inner_name] + names[i + 1:]))
    for _, fine_shape, fine_names in splits:
        fine = expected.reshape(fine_shape)
        for i, j in itertools.combinations(range(len(fine_shape)), 2):
            if fine_shape[i] == fine_shape[j]:
                continue  # a plain swap, tried above
            swapped = list(fine_shape)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            for candidate in (fine.transpose(i, j).reshape(shape),
                              fine.reshape(swapped).transpose(i, j).reshape(shape)):
                if same(actual, candidate):
                    return MESSAGES["view"].format(first=_axis_label(fine_names[i]),
                                                   second=_axis_label(fine_names[j]))
    # the entries read in another order of (up to 4) axes: a permute that moves three
    for _, fine_shape, fine_names in splits:
        if len(fine_shape) > 4:
            continue
        fine = expected.reshape(fine_shape)
        for order in itertools.permutations(range(len(fine_shape))):
            if sorted(order[k] != k for k in range(len(order))).count(True) > 2 and same(
                    actual, fine.permute(order).reshape(shape)):
                return MESSAGES["permuted_view"].format(
                    order=", ".join(fine_names[k] for k in order), got=shape)
    return None


# ------------------------------------------------------------------------------- constants

def constant_names(dims):
    """{label: value} of the constants a mistake often multiplies by: each quantity n, 1/n,
    sqrt(n), 1/sqrt(n), and 2, 1/2, -1."""
    named = {"2": 2.0, "1/2": 0.5, "-1 (the sign)": -1.0}
    for name, n in dims.items():
        if n > 1:
            named.setdefault(name, float(n))
            named.setdefault(f"1/{name}", 1.0 / n)
            named.setdefault(f"sqrt({name})", math.sqrt(n))
            named.setdefault(f"1/sqrt({name})", 1.0 / math.sqrt(n))
    return named


def _name_constant(value, dims, most=3):
    """" = 1/2 = 1/sqrt(d_k)": every label (at most `most`) of the constants `value` equals."""
    labels = [label for label, named in constant_names(dims).items()
              if math.isclose(value, named, rel_tol=1e-6, abs_tol=1e-12)]
    return "".join(f" = {label}" for label in labels[:most])


def _count_off_by_one(factor, largest=64):
    """" = 4/5: as if a sum were divided by 5 where ..." for a factor n/(n+1) or (n+1)/n
    (2 <= n < largest, as closely as _name_constant names a constant): a mean taken over
    one item too many or too few; "" for any other factor."""
    for den in range(2, largest + 1):
        for num in (den - 1, den + 1):
            if num >= 2 and math.isclose(factor, num / den, rel_tol=1e-6):
                return MESSAGES["count_off_by_one"].format(num=num, den=den)
    return ""


def _count_of_entries(factor, largest=4096):
    """" (a whole number: as if 12 entries were summed ...)" for a factor that is a whole
    number n >= 3, or " = 1/n: ... averaged ..." for its inverse (n <= largest): what a sum
    taken in place of a mean (or the reverse) gives when the count n is no named quantity
    (e.g. batch x queries); "" for any other factor."""
    for value, key in ((factor, "count_summed"), (1 / factor, "count_averaged")):
        count = round(value)
        if 3 <= count <= largest and math.isclose(value, count, rel_tol=1e-6):
            return MESSAGES[key].format(count=count)
    return ""


def constant(actual, expected, same, dims):
    """The constant family: actual = c * expected, or actual = expected + c (c != 0)."""
    if tuple(actual.shape) != tuple(expected.shape) or expected.numel() < 2:
        return None
    a, e = actual.detach().double(), expected.detach().double()
    if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(e).all()):
        return None
    norm = float((e * e).sum())
    if norm > 0:
        factor = float((a * e).sum()) / norm
        if abs(factor - 1) > 1e-9 and factor != 0 and same(actual, e * factor):
            return MESSAGES["times"].format(factor=factor, factor_is=_name_constant(
                factor, dims) or _count_off_by_one(factor) or _count_of_entries(factor))
    offset = float((a - e).mean())
    if offset != 0 and same(actual, e + offset) and not same(actual, e):
        return MESSAGES["plus"].format(offset=offset, offset_is=_name_constant(offset, dims))
    return None


# ---------------------------------------------------------------------------------- shifts

def shifted(actual, expected, same, dims, axes=None, most=3):
    """The shift family: along one axis, actual[i] = expected[i - k] (0 < |k| <= most) on
    the positions where both exist (what moved in at the edge is not compared)."""
    shape = tuple(expected.shape)
    if tuple(actual.shape) != shape:
        return None
    names = axis_names(shape, dims, axes)
    # the smallest shift first, on any axis: it leaves the fewest positions uncompared, so a
    # shift of 1 along one axis is not lost to a coincidence of 2 rows along another
    for k in range(1, most + 1):
        for axis, size in enumerate(shape):
            if k > size - 2:
                continue
            for sign in (1, -1):
                a = actual.narrow(axis, k, size - k) if sign > 0 else actual.narrow(axis, 0, size - k)
                e = expected.narrow(axis, 0, size - k) if sign > 0 else expected.narrow(axis, k, size - k)
                # not when the expected values are (nearly) the same at every position
                moved = expected.narrow(axis, k, size - k) if sign > 0 else expected.narrow(
                    axis, 0, size - k)
                if same(a, e) and not same(moved, e):
                    return MESSAGES["shifted"].format(k=k, s="" if k == 1 else "s",
                                                      k_word=_count_word(k),
                                                      axis=_axis_label(names[axis]),
                                                      sign="-" if sign > 0 else "+")
    return None


def _count_word(k):
    """A small count in words ("one" for 1: "off by one"), else the number itself."""
    return MESSAGES["count_words"].get(str(k), str(k))


def _triangle(matrix):
    """(kind "tril"/"triu", diagonal) when the 0/1 `matrix` (..., R, C) is a triangle of
    ones, the same in every leading index; else None."""
    rows, cols = matrix.shape[-2:]
    ones = torch.ones(rows, cols, dtype=torch.bool)
    flat = matrix.reshape(-1, rows, cols)
    if not bool((flat == flat[:1]).all()):
        return None
    first = flat[0]
    for diagonal in range(-rows, cols + 1):
        for kind in ("tril", "triu"):
            if torch.equal(first, getattr(ones, kind)(diagonal)):
                return kind, diagonal
    return None


def mask_family(actual, expected):
    """The mask family, for 0/1 (or bool) masks of one shape: the complement of the right
    mask, or a triangle whose diagonal is off by k."""
    masks = _bool_masks(actual, expected)
    if masks is None:
        return None
    a, e = masks
    if torch.equal(a, ~e):
        return MESSAGES["complement"]
    want, got = _triangle(e), _triangle(a)
    if want and got and want[0] == got[0] and want[1] != got[1]:
        k = got[1] - want[1]
        return MESSAGES["diagonal"].format(k=abs(k), direction=MESSAGES[
                                               "diagonal_up" if k > 0 else "diagonal_down"],
                                           got=got[1], want=want[1])
    return None


def _binary(tensor):
    if tensor.dtype == torch.bool:
        return True
    if not tensor.is_floating_point() and tensor.dtype.is_complex:
        return False
    return bool(((tensor == 0) | (tensor == 1)).all())


# ------------------------------------------------------------------------------- locality

def localized(wrong, dims, axes=None):
    """The locality family: `wrong` (bool, the output's shape: which entries are off) is
    True only at one index, or one block of consecutive indices (at most half), of some
    axis of more than one index; the sentence names every axis where only some indices are
    off (e.g. "index 1 of num_heads; indices 0, 1, 3, 4 of Lk")."""
    if wrong.dim() == 0 or not bool(wrong.any()) or bool(wrong.all()):
        return None
    names = axis_names(tuple(wrong.shape), dims, axes)
    parts, confined = [], False
    for axis in range(wrong.dim()):
        others = [o for o in range(wrong.dim()) if o != axis]
        hit = wrong.any(dim=others) if others else wrong
        index = hit.nonzero().flatten().tolist()
        size = hit.numel()
        if size < 2 or len(index) == size:
            continue
        block = index == list(range(index[0], index[-1] + 1))
        confined |= block and len(index) <= max(1, size // 2)
        parts.append(_indices_text(index, size, names[axis], block))
    if not confined:
        return None
    return MESSAGES["localized"].format(where="; ".join(parts), count=int(wrong.sum()),
                                        total=wrong.numel())


def _indices_text(index, size, name, block):
    if len(index) == 1:
        i = index[0]
        end = (MESSAGES["index_first_end"] if i == 0 else MESSAGES["index_last_end"]
               if i == size - 1 else "")
        return MESSAGES["index_one"].format(index=i, end=end, name=name)
    if block:
        return MESSAGES["indices_block"].format(first=index[0], last=index[-1], name=name,
                                                count=len(index))
    shown = ", ".join(str(i) for i in index[:8]) + (", ..." if len(index) > 8 else "")
    return MESSAGES["indices_list"].format(shown=shown, name=name)


# --------------------------------------------------------------------------- formula steps

class Formula:
    """An exercise's formula as a list of steps, so a check can compute what the formula
    gives with one step left out or moved: data per exercise, not a hand-written bug.

    steps: ((name, function), ...): each function takes the value so far and the inputs
    (a dict) and returns the next value; the first takes None. variants: {step name:
    {what went wrong: function}} of other ways to do a step (the wrong axis, the wrong
    input), each used in place of that step alone. together: {sentence, worded in full:
    {step name: function}}, the standard mistakes that do several steps another way at
    once (post-LN: both LayerNorms moved; both dropouts left out)."""

    # at most this many pairs of changes (pairs()): their outputs go into the kit's fixtures
    MOST_PAIRS = 60

    def __init__(self, steps, variants=None, optional=(), together=None, pairs=True):
        self.steps = tuple(steps)
        self.pair_search = pairs   # whether mistakes() also tries two changes at once
        self.variants = dict(variants or {})
        # the steps that may be left out: {name: what stands in for it (None: identity)}
        self.optional = (dict(optional) if isinstance(optional, dict)
                         else dict.fromkeys(optional))
        self.together = dict(together or {})

    def label(self, name):
        """The step `name` as the sentences show it (a subclass translates it)."""
        return name

    def left_out_meaning(self, name):
        """What leaving out the step `name` means, in words ("" where the name says it; a
        subclass words its steps')."""
        return ""

    def left_out(self, name):
        """The sentence "the {name} step is left out", with what that means where known."""
        meaning = self.left_out_meaning(name)
        if meaning:
            return MESSAGES["formula_left_out_meaning"].format(name=self.label(name),
                                                               meaning=meaning)
        return MESSAGES["formula_left_out"].format(name=self.label(name))

    def run(self, inputs, replace=None):
        """The output, with `replace` {step name: function} used in place of those steps."""
        value = None
        for name, function in self.steps:
            value = (replace or {}).get(name, function)(value, inputs)
        return value

    def changes(self):
        """[(sentence, step name, function)]: each step left out (the optional ones), then
        each done another way (the variants), one at a time."""
        left_out = [(self.left_out(name), name, skip or (lambda value, _inputs: value))
                    for name, skip in self.optional.items()]
        return left_out + [(MESSAGES["formula_changed"].format(name=self.label(name),
                                                               description=description),
                            name, function)
                           for name, ways in self.variants.items()
                           for description, function in ways.items()]

    def pairs(self):
        """[(sentence, {step name: function})]: two changes() of two different steps at
        once, said in step order, those of steps with few ways first (a step with many
        ways, a scale by each named constant, pairs last), at most MOST_PAIRS."""
        ways = self.changes()
        order = [name for name, _ in self.steps]
        ways.sort(key=lambda way: order.index(way[1]))
        size = {name: sum(way[1] == name for way in ways) for name in order}
        pairs = [(size[a] * size[b], MESSAGES["formula_pair"].format(first=first, second=second),
                  {a: f, b: g})
                 for i, (first, a, f) in enumerate(ways) for second, b, g in ways[i + 1:]
                 if a != b]
        pairs.sort(key=lambda pair: pair[0])
        return [(sentence, replace) for _, sentence, replace in pairs[:self.MOST_PAIRS]]

    def mistakes(self, inputs):
        """{sentence: output} of the formula with one step left out or done another way
        (changes()), then with the `together` mistakes, then with two changes at once
        (pairs(): one that gives the numbers of a mistake already found is that one)."""
        tried = {sentence: {name: function} for sentence, name, function in self.changes()}
        tried.update(self.together)
        found = {}
        for sentence, replace in tried.items():
            try:  # a variant that cannot run on these shapes (K Q^T with Lq != Lk) is no fit
                found[sentence] = self.run(inputs, replace)
            except (RuntimeError, KeyError):
                continue
        try:
            right = self.run(inputs)
        except (RuntimeError, KeyError):
            right = None
        tried = [(sentence, inputs, replace) for sentence, replace in self.pairs()
                 if self.pair_search] + [(sentence, other, {}) for sentence, other
                                         in self.input_swaps(inputs)]
        # the outputs so far, each with its sum (a cheap first test of equality)
        known = [(value, _total(value)) for value in [right, *found.values()]
                 if isinstance(value, torch.Tensor)]
        for sentence, values, replace in tried:
            try:
                output = self.run(values, replace)
            except (RuntimeError, KeyError):
                continue
            if not isinstance(output, torch.Tensor):
                continue
            total = _total(output)
            if not any(value.shape == output.shape and _near(total, value_total)
                       and torch.allclose(value, output, rtol=1e-9, atol=1e-12, equal_nan=True)
                       for value, value_total in known):
                found[sentence] = output
                known.append((output, total))
        return found

    # at most this many input swaps (input_swaps())
    MOST_SWAPS = 24

    def input_swaps(self, inputs):
        """[(sentence, inputs)]: the inputs with one floating-point tensor used in place of
        another of the same shape (every step that reads the second reads the first): a
        step done on the wrong input, for any formula; at most MOST_SWAPS."""
        tensors = [name for name, value in inputs.items()
                   if isinstance(value, torch.Tensor) and value.is_floating_point()]
        swaps = [(MESSAGES["formula_input_swap"].format(used=used, meant=meant),
                  {**inputs, meant: inputs[used]})
                 for meant in tensors for used in tensors
                 if used != meant and inputs[used].shape == inputs[meant].shape
                 and not torch.equal(inputs[used], inputs[meant])]
        return swaps[:self.MOST_SWAPS] if self.pair_search else []

    def values(self, inputs):
        """[(step label, value)]: what the formula holds after each step on `inputs`, in step
        order (the trace family compares the student's traced tensors with them; the label,
        label(), is the step as the sentences show it, in the language of now): a tensor,
        or for a formula that carries a state ({name: tensor}) the {name: tensor} that step
        made; None for a step that changes nothing here (no mask, one key/value head per
        query head)."""
        value, found = None, []
        for name, function in self.steps:
            before, value = value, function(value, inputs)
            if isinstance(value, dict):
                earlier = before if isinstance(before, dict) else {}
                made = {key: tensor for key, tensor in value.items()
                        if isinstance(tensor, torch.Tensor) and not (
                            isinstance(earlier.get(key), torch.Tensor)
                            and _unchanged(earlier[key], tensor))}
                found.append((self.label(name), made or None))
            elif isinstance(value, torch.Tensor) and not _unchanged(before, value):
                found.append((self.label(name), value))
            else:
                found.append((self.label(name), None))
        return found


def _unchanged(before, after):
    """Whether a step's value `after` is `before` (the same tensor, or equal entries)."""
    return isinstance(before, torch.Tensor) and (before is after or (
        before.shape == after.shape and before.dtype == after.dtype
        and torch.equal(before, after)))


def _total(tensor):
    """The sum of a tensor's entries as a float (NaN where any is NaN or inf)."""
    return float(tensor.detach().double().sum()) if tensor.numel() else 0.0


def _near(a, b):
    """Whether two sums may belong to equal tensors (NaN or inf: may)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return True
    return abs(a - b) <= 1e-6 * (1 + abs(a) + abs(b))


def one_step(actual, mistakes, same):
    """The formula family: which of `mistakes` ({sentence: output}, from Formula.mistakes)
    `actual` equals; all of them where several give the same numbers on these inputs
    (dividing by head_dim = 4 is dividing by sqrt(d_model) when d_model = 16)."""
    found = [sentence for sentence, value in (mistakes or {}).items()
             if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(actual.shape)
             and same(actual, value)]
    if len(found) > 1:
        return MESSAGES["steps"].format(first=found[0],
                                        others=MESSAGES["steps_or"].join(found[1:]))
    return MESSAGES["step"].format(step=found[0]) if found else None


# --------------------------------------------------------------------------------- errors

_NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def restate_error(name, kind, message, dims, shapes="", where="", line=""):
    """The student's exception, with the sizes it quotes named by the exercise's quantities
    ("6 = num_heads") and the line of the student's code it came from (`where`, "line 5 of
    cell stable_softmax: e = ...", see checks.operations.student_line); None when it has
    neither. shapes: those of the call's tensor arguments, as text; line: the shapes on the
    raising line (checks.operations.line_shapes, JSON text), which the likely cause reads."""
    text = _restated(name, kind, message, dims, shapes, where)
    # the code after "line N of <cell>: " (or the Chinese "<cell> 第 N 行：", as a student's
    # process that speaks Chinese says it: operations.MESSAGES["student_line_code"])
    code = (re.split(r": |：", where or "", maxsplit=1) + [""])[1]
    # what the error means, where its kind is known (error_reason), after PyTorch's words,
    # then the likely mistake behind it, from its sizes and the student's line (error_cause)
    reason, cause = error_reason(message, dims, code), error_cause(message, dims, code, line)
    if reason or cause:
        text = (text or MESSAGES["raised_plain"].format(name=name, kind=kind, message=message,
                                                         shapes=shapes))
    named = _line_report(line)[1]
    if text and named:
        text += MESSAGES["raised_line_shapes"].format(named=", ".join(
            _shape_of(expression, shape, dims) for expression, shape in named))
    if reason:
        text += MESSAGES["raised_reason"].format(reason=reason)
    if cause:
        text += MESSAGES["raised_cause"].format(cause=cause)
    return text


def _restated(name, kind, message, dims, shapes, where):
    """restate_error()'s message without error_reason()'s sentence, or None."""
    named = []
    for number in dict.fromkeys(_NUMBER.findall(message)):
        quantity = _quantity(int(number), dims)
        if quantity and int(number) > 1:
            named.append(f"{number}{quantity}")
    if where:
        sizes = MESSAGES["raised_sizes"].format(named=", ".join(named)) if named else ""
        return MESSAGES["raised_at"].format(name=name, kind=kind, where=where,
                                            message=message, shapes=shapes, sizes=sizes)
    if not named:
        return None
    return MESSAGES["raised"].format(name=name, kind=kind, named=", ".join(named),
                                     message=message, shapes=shapes)


# ------------------------------------------------------------------------------- together

def explain(actual, expected, same, wrong, dims, axes=None, mistakes=None):
    """The first family that names how `actual` differs from `expected` (same shape), as a
    reason (no name, no full stop), or None. same(a, b): equal within the check's tolerance;
    wrong: bool tensor of the entries off; mistakes: Formula.mistakes() of the exercise."""
    for attempt in (lambda: one_step(actual, mistakes, same),
                    lambda: mask_family(actual, expected),
                    lambda: other_layout(actual, expected, same, dims, axes),
                    lambda: constant(actual, expected, same, dims),
                    lambda: shifted(actual, expected, same, dims, axes),
                    lambda: localized(wrong, dims, axes),
                    lambda: nonfinite(actual, expected, dims, axes),
                    lambda: mask_runs(actual, expected, dims, axes),
                    lambda: all_zero(actual, expected),
                    lambda: offset_along(actual, expected, same, dims, axes),
                    lambda: rescaled_lines(actual, expected, same, dims, axes),
                    lambda: indices_permuted(actual, expected, same, dims, axes),
                    lambda: triangle_kind(actual, expected, dims, axes),
                    lambda: one_minus(actual, expected, same),
                    lambda: float32_rounding(actual, expected)):
        reason = attempt()
        if reason:
            return reason
    return None


def explained(name, reason):
    """The failure message for `reason` (a family's sentence)."""
    return MESSAGES["explained"].format(name=name, reason=reason)


def repaired(about):
    """The repair family's sentence (no full stop) for `about`, the description of the one
    edit of the student's code with which the check passes (checks.repair.mutants'; under the
    autograder bounded text from the student's process: checks.common.repair_descriptions)."""
    kind = about["kind"]
    fields = {key: about[key] for key in ("line", "function", "code", "before", "after",
                                          "step", "edited")}
    # (the whole edited line, where the edit is a part of it)
    fields["reads"] = (MESSAGES["repair_reads"].format(edited=about["edited"])
                       if about["edited"] and about["edited"] != about["after"] else "")
    if kind == "unwrap" and about["step"] in ("transpose", "T", "mT", "permute", "t"):
        clause = MESSAGES["repair_unwrap_transpose"]
    else:
        clause = MESSAGES["repair_clause"][kind].format(**fields)
    return MESSAGES["repair_delete" if kind == "delete" else "repair"].format(
        clause=clause, **fields)


def _signature(key):
    """The longest fixed text of MESSAGES[key], which every sentence of that template holds
    (its start alone may be as common as "its ")."""
    return max((literal for literal, *_ in string.Formatter().parse(MESSAGES[key]) if literal),
               key=len)


# the templates of the families' sentences (the shape family's and restate_error's are
# matched below by their own words)
FAMILY_KEYS = ("swap", "view", "reversed", "factors", "times", "plus", "shifted",
               "complement", "diagonal", "localized", "step", "steps",
               "nonfinite", "runs", "runs_complement", "overflow", "singleton_missing",
               "singleton_extra", "parameter",
               "reduced", "merged", "kind",
               "zeros", "in_place", "state",
               "starting_states",
     "item_order", "split_axis",
               "raised_reason", "offset_along", "earlier", "permuted", "permuted_view",
               "reduced_many", "rescaled_lines", "indices_permuted", "in_place_shape",
               "unrepeatable", "triangle", "one_minus", "raised_cause", "shape_swap_cause",
               "shape_recut", "float32_rounding", "step_nonfinite", "part_of",
               "trace_departs", "trace_returned", "shape_merged_axes", "shape_made",
               "repair", "repair_delete")
# a message that a family produced, for tests and the measurement of the families alone
FAMILY_PATTERN = re.compile(
    "|".join(re.escape(_signature(key)) for key in FAMILY_KEYS)
    + r"|has \d+(?: = [\w\[\]]+(?: \* [\w\[\]]+)*)* entries; it should have"
    r"|the sizes are right but the axes|an extra axis of size|it lacks the \S+ axis"
    r"|\(the sizes in it: |\(at line \d+ of ")


# ------------------------------------------------------------------- non-finite entries

def nonfinite(actual, expected, dims, axes=None, regions=None):
    """The non-finite family: `actual` holds NaN or inf where `expected` is finite; the
    sentence says where, in the exercise's words: the first of `regions` ({words: bool
    tensor that broadcasts to the shape}, places the check can name, e.g. "the rows of the
    queries with no key to attend to") that holds every such entry, else the indices of
    each axis where only some hold one (as localized() says them)."""
    if tuple(actual.shape) != tuple(expected.shape) or actual.numel() == 0:
        return None
    a, e = actual.detach(), expected.detach()
    bad = ~torch.isfinite(a) & torch.isfinite(e)
    if not bool(bad.any()):
        return None
    kinds = [word for word, found in (("NaN", torch.isnan(a) & bad),
                                      ("inf", torch.isinf(a) & bad)) if bool(found.any())]
    where = None
    for words, region in (regions or {}).items():
        region = region.to(bad.device).bool().expand(bad.shape)
        if not bool((bad & ~region).any()):
            inside = int(region.sum())
            covered = (MESSAGES["nonfinite_every"].format(inside=inside)
                       if torch.equal(bad, region) else
                       MESSAGES["nonfinite_some"].format(count=int(bad.sum()), inside=inside))
            where = MESSAGES["nonfinite_region"].format(region=words, covered=covered)
            break
    if where is None:
        names = axis_names(tuple(bad.shape), dims, axes)
        parts = []
        for axis in range(bad.dim()):
            others = [o for o in range(bad.dim()) if o != axis]
            hit = bad.any(dim=others) if others else bad
            index = hit.nonzero().flatten().tolist()
            if 1 < hit.numel() and len(index) < hit.numel():
                block = index == list(range(index[0], index[-1] + 1))
                parts.append(_indices_text(index, hit.numel(), names[axis], block))
        where = (MESSAGES["nonfinite_at"].format(parts="; ".join(parts)) if parts
                 else MESSAGES["nonfinite_spread"])
    return MESSAGES["nonfinite"].format(count=int(bad.sum()), total=bad.numel(),
                                        kinds=MESSAGES["and_joiner"].join(kinds), where=where)


# ------------------------------------------------------------------------ mask boundaries

def _run_counts(lines):
    """(kind, counts) when every line (..., n) of the bool `lines` is one run of True at
    its start ("prefix") or every one a run at its end ("suffix"); else None. A line of all
    True or all False counts as either."""
    n = lines.shape[-1]
    counts = lines.sum(dim=-1)
    positions = torch.arange(n, device=lines.device)
    for kind, run in (("prefix", positions < counts[..., None]),
                      ("suffix", positions >= n - counts[..., None])):
        if torch.equal(lines, run):
            return kind, counts
    return None


def mask_runs(actual, expected, dims, axes=None, most=3):
    """The boundary family, for 0/1 masks of one shape: along some axis every line of both
    is one run of True at its start (or every one at its end), as a padding mask's are, and
    each of actual's runs is the right one's lengthened or shortened by the same k
    (0 < |k| <= most; clipped at the ends): off by k, e.g. p <= length where p < length is
    right; or the same of the right mask's complement."""
    if tuple(actual.shape) != tuple(expected.shape) or expected.dim() == 0:
        return None
    a, e = actual.detach(), expected.detach()
    if not (_binary(a) and _binary(e)):
        return None
    a, e = a.bool().cpu(), e.bool().cpu()
    if triangle_kind(a, e, dims, axes):   # triangles of two kinds: that family's words
        return None
    names = axis_names(tuple(e.shape), dims, axes)
    for axis, size in enumerate(e.shape):
        if size < 2:
            continue
        got = _run_counts(a.movedim(axis, -1))
        for template, right in (("runs", e), ("runs_complement", ~e)):
            want = _run_counts(right.movedim(axis, -1))
            if not (got and want and got[0] == want[0]):
                continue
            for k in (step * sign for step in range(1, most + 1) for sign in (1, -1)):
                moved = (want[1] + k).clamp(0, size)
                if torch.equal(got[1], moved) and not torch.equal(moved, want[1]):
                    return MESSAGES[template].format(
                        axis=_axis_label(names[axis]), k=abs(k), s="" if abs(k) == 1 else "s",
                        k_word=_count_word(abs(k)),
                        longer=MESSAGES["runs_longer" if k > 0 else "runs_shorter"])
    return None


# ------------------------------------------------------------------ a number beyond a dtype

# the names PyTorch's overflow error gives a dtype (c10's C++ type names)
_C10_DTYPES = {"c10::Half": torch.float16, "c10::BFloat16": torch.bfloat16,
               "float": torch.float32, "double": torch.float64}
_OVERFLOW = re.compile(r"cannot be converted to type (\S+) without overflow")


def overflow(message):
    """The overflow family, for an error the student's code raised: a number it writes into
    a tensor (masked_fill, fill_, full) is beyond the tensor's dtype, e.g. -1e9 in float16;
    the sentence names the dtype and its range. None for any other error."""
    found = _OVERFLOW.search(message or "")
    dtype = found and _C10_DTYPES.get(found.group(1))
    if not dtype:
        return None
    return MESSAGES["overflow"].format(dtype=dtype, top=torch.finfo(dtype).max)


# ------------------------------------------------------------------- axes of size 1

def singleton_axes(got, want, dims, axes=None):
    """The singleton family for shapes: `got` is `want` with two or more axes of size 1
    left out or added, its other sizes in order (one axis is wrong_shape's), e.g. a (B, Lk)
    mask where (B, 1, 1, Lk) is asked for, so that it broadcasts over heads and queries."""
    got, want = tuple(got), tuple(want)
    longer, shorter = (want, got) if len(want) > len(got) else (got, want)
    if len(longer) - len(shorter) < 2:
        return None
    extra, matched = [], 0
    for index, size in enumerate(longer):   # match the shorter shape's sizes in order
        if matched < len(shorter) and size == shorter[matched]:
            matched += 1
        elif size == 1:
            extra.append(index)
        else:
            return None
    if matched < len(shorter) or len(extra) != len(longer) - len(shorter):
        return None
    positions = (", ".join(str(i) for i in extra[:-1]) + MESSAGES["and_joiner"]
                 + str(extra[-1]))
    key = "singleton_missing" if longer == want else "singleton_extra"
    return MESSAGES[key].format(count=len(extra), positions=positions,
                                want_axes=", ".join(axis_names(want, dims, axes)))


# --------------------------------------------------------------- a promised parameter

_UNEXPECTED = re.compile(r"(\w+)\(\) got an unexpected keyword argument '(\w+)'")


def missing_parameter(message):
    """The parameter family, for an error the student's code raised: a check passed a
    parameter the exercise promises (cache=, device=, mask=) and the student's function
    has none of that name. None for any other error."""
    found = _UNEXPECTED.search(message or "")
    if not found:
        return None
    return MESSAGES["parameter"].format(function=found.group(1), parameter=found.group(2))
# ------------------------------------------------------------------- fewer axes (chapter 3)

def fewer_axes(actual, expected, same, dims, axes=None):
    """The fewer-axes family: `actual` has one axis less than `expected` and holds its
    values with one axis reduced (averaged, summed, or one index of it taken: the first or
    the last) or two neighbouring axes merged into one (a flatten or reshape too many)."""
    got, want = tuple(actual.shape), tuple(expected.shape)
    if len(got) + 1 != len(want):
        return None
    names = axis_names(want, dims, axes)
    for axis in range(len(want)):
        if want[:axis] + want[axis + 1:] != got or want[axis] < 2:
            continue
        for how, reduce in (("reduced_mean", lambda e: e.mean(axis)),
                            ("reduced_sum", lambda e: e.sum(axis)),
                            ("reduced_first", lambda e: e.select(axis, 0)),
                            ("reduced_last", lambda e: e.select(axis, -1))):
            if same(actual, reduce(expected.to(actual.dtype))):
                return MESSAGES["reduced"].format(how=MESSAGES[how].format(
                    axis=_axis_label(names[axis])))
    for axis in range(len(want) - 1):
        if want[:axis] + (want[axis] * want[axis + 1],) + want[axis + 2:] == got and \
                same(actual, expected.flatten(axis, axis + 1)):
            return MESSAGES["merged"].format(first=names[axis], second=names[axis + 1],
                                             size=got[axis], axis=axis)
    return None


# ------------------------------------------------------------------------- kinds (chapter 3)

def _described(value):
    """A value in words, for the kind family: "a float (4.0)", "None", "a tuple of 2 items",
    "a Tensor of shape (2, 5)", "a 0-d Tensor"."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return (MESSAGES["described_scalar"] if value.dim() == 0 else
                MESSAGES["described_tensor"].format(shape=tuple(value.shape)))
    if isinstance(value, (tuple, list)):
        return MESSAGES["described_items"].format(kind=type(value).__name__, count=len(value))
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"   # (English's: the template's)
    if isinstance(value, (bool, int, float, str)):
        return MESSAGES[f"described_{article}"].format(kind=kind, value=value)
    return MESSAGES[f"described_{article}_kind"].format(kind=kind)


def kind(what, documented, value=None, kinds=(), raised=None):
    """The kind family: what a call or an attribute gave is of another kind than the
    exercise documents. what: the call or attribute as the student reads it ("head_dim",
    "count_parameters(10, 4)"); documented: the documented kind in words ("an int", "a
    ValueError"); kinds: the documented Python types (a value of one of them fits: None),
    or () when an exception is documented (the exception's name is `documented`'s last
    word); value: what it returned; raised: the name of the exception it raised, or None.
    A bool is no int here (True == 1 would hide a flag returned for a count)."""
    if raised is not None:
        if not kinds and raised == documented.split()[-1]:
            return None
        outcome = MESSAGES["kind_raised"].format(raised=raised)
    elif kinds:
        fits = isinstance(value, tuple(kinds)) and not (
            isinstance(value, bool) and bool not in kinds)
        if fits:
            return None
        # a call (its arguments shown) returned the value; an attribute is it (a call's
        # label in Chinese closes with a full-width bracket: "equivariance_gap（...）")
        outcome = MESSAGES["kind_returned" if what.endswith((")", "）")) else "kind_is"].format(
            described=_described(value))
        if isinstance(value, torch.Tensor) and value.numel() == 1 \
                and set(kinds) & {int, float}:
            documented += MESSAGES["kind_item"]
        elif value is None:
            documented += MESSAGES["kind_none"]
    else:
        outcome = (MESSAGES["kind_raised_nothing"] if value is None
                   else MESSAGES["kind_returned_only"].format(described=_described(value)))
    return MESSAGES["kind"].format(what=what, outcome=outcome, documented=documented)


# ----------------------------------------------------------------- zeros (chapter 5)

def all_zero(actual, expected):
    """The zeros family: every entry of `actual` is 0 and some entry of `expected` is not
    (a copy or a write that never happened: a fresh tensor, or a new layer's zero bias)."""
    if tuple(actual.shape) != tuple(expected.shape) or expected.numel() == 0:
        return None
    if bool((actual.detach() == 0).all()) and not bool((expected.detach() == 0).all()):
        return MESSAGES["zeros"]
    return None


# ----------------------------------------------------------------- in place, states

def changed_in_place(what, before, after):
    """The in-place family: `after` (an argument as the student's call left it) differs from
    `before` (as it was passed in), same shape; `what` names the argument in the exercise's
    words ("its input weights", "mha's q_proj.weight"). None when nothing changed."""
    if not (isinstance(after, torch.Tensor) and tuple(after.shape) == tuple(before.shape)):
        return None
    a, b = after.detach().cpu().double(), before.detach().cpu().double()
    changed = ~((a == b) | (torch.isnan(a) & torch.isnan(b)))
    if not bool(changed.any()):
        return None
    return MESSAGES["in_place"].format(what=what, count=int(changed.sum()), total=b.numel())


def wrong_state(quantity, got, want, why=""):
    """The state family: a state that the exercise fixes (a module's training/eval mode, its
    dropout, a cache's length ...) is `got` where `want` is right; `why` (" (mha's mode)")
    says what fixes it. None when they agree."""
    if got == want:
        return None
    return MESSAGES["state"].format(quantity=quantity, got=got, want=want, why=why)


# -------------------------------------------------------------------------- starting states

def state_dependent(outcomes):
    """The state family: a result right from some starting states and wrong from others (a
    mode, an empty or a filled cache that the code does not treat alike). outcomes: {the
    starting state, in words: (whether the result from it is right, what went wrong from it
    (a sentence, for the wrong ones))}, in the order the check tried them; None unless some
    are right and some wrong. It runs on what the check read back, not on tensors, so
    explain() does not try it."""
    right = [state for state, (ok, _) in outcomes.items() if ok]
    wrong = {state: what for state, (ok, what) in outcomes.items() if not ok}
    if not right or not wrong:
        return None
    return MESSAGES["starting_states"].format(right=MESSAGES["and_joiner"].join(right),
                                              wrong=MESSAGES["and_joiner"].join(wrong),
                                              detail="; ".join(wrong.values()))


# ------------------------------------------------------------------------------ tuples

def item_order(got_shapes, want_shapes, names):
    """The tuple family: a returned tuple whose items have the shapes of the expected items
    in another order (e.g. (weights, output) for (output, weights)). got_shapes,
    want_shapes: one shape per item; names: the expected items' names. None when the
    shapes do not tell the items apart or are in the right order."""
    got, want = [tuple(s) for s in got_shapes], [tuple(s) for s in want_shapes]
    if got == want or len(set(want)) != len(want) or sorted(got) != sorted(want):
        return None
    return MESSAGES["item_order"].format(got=", ".join(names[want.index(s)] for s in got),
                                         want=", ".join(names))


def split_axis(got, want, dims, axes=None):
    """The unmerged-axis family of shapes: `got` has one axis more than `want`, two of its
    axes multiply to the size of one axis of `want`, and the other sizes are `want`'s (the
    heads not flattened back into d_model, say). got, want: tuples of sizes."""
    got, want = tuple(got), tuple(want)
    if len(got) != len(want) + 1:
        return None
    want_names = axis_names(want, dims, axes)
    for i, j in itertools.combinations(range(len(got)), 2):
        rest = [size for k, size in enumerate(got) if k not in (i, j)]
        for k, size in enumerate(want):
            if got[i] * got[j] == size and sorted(rest) == sorted(want[:k] + want[k + 1:]):
                got_names = axis_names(got, dims)
                return MESSAGES["split_axis"].format(
                    axis=want_names[k], size=size, first=got_names[i], second=got_names[j],
                    got_axes=", ".join(got_names), want_axes=", ".join(want_names))
    return None


def located(where):
    """The line saying where the student's code raised (`where`: checks.operations.
    student_line), for a check that words the error itself; "" where it is not known."""
    return MESSAGES["raised_where"].format(where=where) if where else ""


# ------------------------------------------------------------- what an error means (any exercise)



def _product_name(size, dims, most=3, shown=3):
    """" = batch * L" for a size that a product of two or three named quantities has (each
    such product, the fewest factors first, at most `shown`), else ""; a size that one
    quantity has is named by it (_quantity)."""
    single = _quantity(size, dims)
    if single:
        return single
    named = [(n, v) for n, v in dims.items() if v > 1]
    products = [" * ".join(n for n, _ in combo)
                for count in range(2, most + 1)
                for combo in itertools.combinations(named, count)
                if math.prod(v for _, v in combo) == size]
    return "".join(f" = {product}" for product in products[:shown])


_REDUCTION = re.compile(r"\.(sum|mean|amax|amin|max|min|logsumexp|norm|prod)\(([^()]*)\)")


def _no_keepdim(code):
    """The first reduction call of `code` with an axis and no keepdim ('.sum(dim=-1)'), or
    None."""
    tree = _line_tree(code)
    if tree is not None:   # only a reduction that meets another tensor entry by entry
        return _no_keepdim_in(tree)
    for found in _REDUCTION.finditer(code or ""):
        if found.group(2).strip() and "keepdim" not in found.group(2):
            return found.group(0)
    return None


def _view_size_in_place_of(sizes, have, dims):
    """"; 4 = Lq stands where 7 = Lk would fit ..." when replacing one size of a view's
    `sizes` by another named quantity makes the sizes hold the tensor's `have` entries (a
    size read from the wrong tensor: the queries' length for the keys); "" otherwise."""
    want = math.prod(sizes)
    for axis, size in enumerate(sizes):
        if size <= 0 or (size * have) % want:
            continue
        fits = size * have // want
        if fits != size and _quantity(fits, dims) and _quantity(size, dims):
            return MESSAGES["error_view_in_place_of"].format(
                size=size, size_is=_quantity(size, dims), fits=fits,
                fits_is=_quantity(fits, dims), axis=axis)
    return ""


def _orientation(left, code):
    """What B's last axis having A's `left` entries says of a failed A @ B, decided from the
    student's line `code`: B transposed on the line (a transpose too many), B used as it is
    (the transpose missing), a line that shows no product (a layer: nothing said of B), or
    no line (either)."""
    tree = _line_tree(code)
    if tree is None or not tree.body:
        return MESSAGES["error_product_orientation"].format(left=left)
    products = _products(tree)
    if len(products) != 1:
        return ""
    operand = products[0][1]
    transposed = [node for node in ast.walk(operand)
                  if (isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "mH", "H"))
                  or (isinstance(node, ast.Call) and getattr(node.func, "attr", "")
                      in _TRANSPOSES)]
    if transposed:
        return MESSAGES["error_product_transposed_extra"].format(
            left=left, operand=ast.unparse(operand))
    return MESSAGES["error_product_transposed"].format(left=left)


def _leaf_written(code, view=False):
    """What writing in place into a tensor that requires grad means, for the tensor the
    student's line `code` writes into: a module's attribute (a parameter: written inside
    torch.no_grad()), a plain name (an argument the check passes with requires_grad=True,
    or a tensor made from one: computed out of place; where PyTorch says it is a `view` of
    the leaf, either: the name may hold a view of a parameter), or, without the line,
    either."""
    tree = _line_tree(code)
    written = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            written = node.targets[0].value
        elif isinstance(node, ast.AugAssign):
            written = node.target
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr.endswith("_") and not node.func.attr.endswith("__")):
            written = node.func.value
        if written is not None:
            break
    while isinstance(written, ast.Subscript):
        written = written.value
    if isinstance(written, ast.Attribute):
        return MESSAGES["error_leaf_parameter"].format(tensor=ast.unparse(written))
    if isinstance(written, ast.Name):
        return MESSAGES["error_leaf_view" if view else "error_leaf_argument"].format(
            tensor=written.id)
    return MESSAGES["error_leaf"]


# Errors whose message alone says what went wrong: (pattern, MESSAGES key), the pattern's
# named groups the template's fields; error_reason tries them in this order after its others
# (a NoneType error among them first).
_PLAIN_ERRORS = (
    (r"view size is not compatible with input tensor's size and stride", "error_stride"),
    (r"not enough values to unpack \(expected (?P<want>\d+), got (?P<got>\d+)\)",
     "error_unpack"),
    (r"too many values to unpack \(expected (?P<want>\d+)", "error_unpack_many"),
    (r"masked_fill_? only supports boolean masks, but got mask with dtype (?P<dtype>\w+)",
     "error_bool_mask"),
    (r"input\.dim\(\) = (?P<got>\d+) is not equal to len\(dims\) = (?P<want>\d+)",
     "error_permute"),
    (r"stack expects each tensor to be equal size, but got (?P<first>\[[\d, ]*\]) at entry "
     r"\d+ and (?P<second>\[[\d, ]*\])", "error_stack"),
    (r"batch[12] must be a 3D tensor", "error_bmm"),
    (r"(?P<call>\w+): input tensor must have at least 2 dimensions", "error_rank2"),
    (r"(?P<call>\w+)\(\): argument '(?:size|shape)' .*(?:tuple of ints, ?but got float|must "
     r"be tuple of ints, not float)", "error_float_size"),
    (r"cannot assign '[\w.]+' as parameter '(?P<parameter>\w+)'", "error_parameter"),
    (r"Boolean value of Tensor with more than one value is ambiguous", "error_ambiguous"),
    # an AttributeError on a Python number ('float' object has no attribute 'backward'):
    # the value was made a plain number where a tensor was needed (a loss taken with .item()
    # before backward, d_k = x.shape[-1] used as a tensor), not a name the exercise's object
    # lacks; before the general attribute row
    (r"'(?P<what>float|int|bool|complex)' object has no attribute '(?P<attribute>\w+)'",
     "error_number_attribute"),
    (r"'(?P<what>tuple|list)' object has no attribute '(?P<attribute>\w+)'",
     "error_tuple_attribute"),
    (r"'(?P<what>\w+)' object has no attribute '(?P<attribute>\w+)'", "error_attribute"),
    (r"result type Float can't be cast to the desired output type (Long|Int)", "error_cast"),
    (r"tensors used as indices must be long, int, byte or bool tensors", "error_index_kind"),
    (r"could not infer output dtype\. Input dtype must be either a floating point",
     "error_integer_mean"),
    (r"(?P<call>max|min)\(\) received an invalid combination of arguments - got \(dim=tuple",
     "error_max_axes"),
    (r"only Tensors of floating point dtype can require gradients", "error_integer_grad"),
    (r"masked_fill_? only supports a 0-dimensional value tensor, but got tensor with "
     r"(?P<rank>\d+) dimension", "error_fill_value"),
    (r"only one element tensors can be converted to Python scalars", "error_scalar"),
)


def _own_refusal(code):
    """Whether the student's line `code` is a raise or an assert of their own: the error is
    their code refusing the inputs, not an operation that failed on them."""
    return bool(re.match(r"\s*(raise\b|assert\b)", code or ""))


def error_reason(message, dims, code=""):
    """What an error the student's code raised means, in the exercise's words: which
    operation met which sizes (each named by the quantity it equals, or the product of
    quantities), and what that operation needs; `code`: the line of the student's cell it
    came from, which may show the cause (a reduction without keepdim=True). None for an
    error of another kind."""
    message = message or ""
    if _own_refusal(code):
        return MESSAGES["error_own_refusal"]

    def sized(key, **sizes):
        fields = {}
        for field, value in sizes.items():
            fields[field] = value
            fields[field + "_is"] = _product_name(value, dims) if isinstance(value, int) else ""
        return MESSAGES[key].format(**fields)

    found = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and "
                      r"(\d+)x(\d+)\)", message)
    if found:
        rows, left, right, last = map(int, found.groups())
        reason = sized("error_product", left=left, right=right)
        if "*" in _product_name(rows, dims):   # A had batch axes, flattened by PyTorch
            reason += sized("error_product_flat", rows=rows)
        if last == left:
            reason += _orientation(left, code)
        return reason
    found = re.search(r"Expected size for first two dimensions of batch2 tensor to be: "
                      r"\[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]", message)
    if found:
        batch, left, other_batch, right = map(int, found.groups())
        if batch != other_batch:
            return sized("error_product_batch", left=batch, right=other_batch)
        return sized("error_product", left=left, right=right)
    found = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                      r"\((\d+)\) at non-singleton dimension (\d+)", message)
    if found:
        left, right, axis = map(int, found.groups())
        reason = sized("error_broadcast", left=left, right=right, axis=axis)
        call = _no_keepdim(code)
        return reason + (MESSAGES["error_keepdim"].format(call=call) if call else "")
    found = re.search(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", message)
    if found:
        sizes = [int(s) for s in found.group(1).split(",")]
        have = int(found.group(2))
        if -1 in sizes:
            return sized("error_view", sizes=", ".join(
                f"{s}{_product_name(s, dims)}" if s > 0 else "-1" for s in sizes),
                want=MESSAGES["view_multiple"].format(size=math.prod(s for s in sizes if s > 0)),
                have=have)
        unknown = [s for s in sizes if s > 1 and not _quantity(s, dims)
                   and not _product_name(s, dims)] if dims else []
        return sized("error_view", sizes=_sizes_text(sizes, dims),
                     want=math.prod(sizes), have=have) + (MESSAGES["error_view_unknown"].format(
                         sizes=", ".join(map(str, unknown))) if unknown else
                         "" if _viewed_to_shape_of(_line_tree(code)) else
                         _view_size_in_place_of(sizes, have, dims))
    found = re.search(r"Dimension out of range \(expected to be in range of \[(-?\d+), "
                      r"(-?\d+)\], but got (-?\d+)\)", message)
    if found:
        low, high, got = map(int, found.groups())
        return MESSAGES["error_axis"].format(got=got, rank=high + 1, low=low, high=high)
    found = (re.search(r"expected scalar type (\w+) but found (\w+)", message)
             or re.search(r"to have the same dtype, but got:? (\w+) != (\w+)", message))
    if found:
        return MESSAGES["error_dtype"].format(first=found.group(1).lower(),
                                              second=found.group(2).lower())
    found = re.search(r"Sizes of tensors must match except in dimension (\d+)\. Expected size "
                      r"(\d+) but got size (\d+)", message)
    if found:
        axis, left, right = map(int, found.groups())
        return sized("error_cat", axis=axis, left=left, right=right)
    found = re.search(r"The expanded size of the tensor \((\d+)\) must match the existing "
                      r"size \((\d+)\)", message)
    if found:
        return sized("error_expand", want=int(found.group(1)), have=int(found.group(2)))
    found = re.search(r"index (-?\d+) is out of bounds for dimension \d+ with size (\d+)",
                      message)
    if found:
        size = int(found.group(2))
        return sized("error_index", index=int(found.group(1)), size=size, last=size - 1)
    if re.search(r"'NoneType'|NoneType\b", message):
        return (_none_as_object(message) or MESSAGES["error_none"]) + _none_on_line(message,
                                                                                     code)
    if "a leaf Variable that requires grad is being used in an in-place operation" in message:
        return _leaf_written(code, view="a view of a leaf" in message)
    found = re.search(r"split_sizes to sum exactly to (\d+) .*split_sizes=\[([\d, ]*)\]",
                      message)
    if found:
        total = int(found.group(1))
        return sized("error_split", sizes=found.group(2), total=total)
    found = re.search(r"'([\w.]+)' object is not callable", message)
    if found:
        return MESSAGES["error_not_callable"].format(
            what=found.group(1), shape=MESSAGES["error_shape_call"]
            if found.group(1) == "torch.Size" else "")
    found = re.search(r"(\w+)\(\) missing 1 required positional arguments?: [\"']?(\w+)",
                      message)
    if found:
        return MESSAGES["error_argument"].format(
            call=found.group(1), argument=found.group(2),
            axis=MESSAGES["error_argument_dim"] if found.group(2) == "dim" else "")
    found = re.search(r"subscript (\w) has size (\d+) for operand (\d+) which does not "
                      r"broadcast with previously seen size (\d+)", message)
    if found:
        return sized("error_einsum", letter=found.group(1), left=int(found.group(2)),
                     operand=found.group(3), right=int(found.group(4)))
    for pattern, key in _PLAIN_ERRORS:
        found = re.search(pattern, message)
        if found:
            return MESSAGES[key].format(**found.groupdict())
    return (overflow(message) or _library_keyword(message, code)
            or missing_parameter(message) or more_error_reasons(message)
            or call_reasons(message, code))


# ------------------------------------------------------------ an offset along one axis

def _finite_lines(actual, expected, dims, axes=None):
    """(actual, expected) in float64, their shape and its axis names, for the families that
    compare lines along one axis (offset_along, rescaled_lines): both of one shape with at
    least two axes and four entries, every entry finite; else None."""
    shape = tuple(expected.shape)
    if tuple(actual.shape) != shape or expected.dim() < 2 or expected.numel() < 4:
        return None
    a, e = actual.detach().double(), expected.detach().double()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(e).all())):
        return None
    return a, e, shape, axis_names(shape, dims, axes)


def offset_along(actual, expected, same, dims, axes=None, vectors=None):
    """The offset family: actual = expected + v, with v a vector along one axis (the same
    at every index of the other axes) that is not a constant (constant()'s): a bias added
    once too often, or left out. vectors: {name: 1-D tensor} the check can name (the
    exercise's bias), said with the multiple of it that v is, where one is."""
    pair = _finite_lines(actual, expected, dims, axes)
    if pair is None:
        return None
    a, e, shape, names = pair
    difference = a - e
    for axis, size in enumerate(shape):
        if size < 2:
            continue
        others = [o for o in range(len(shape)) if o != axis]
        offset = difference.mean(dim=others, keepdim=True)
        flat = offset.flatten()
        if float((flat - flat.mean()).abs().max()) <= 1e-9 * (1 + float(flat.abs().max())):
            continue   # one constant: constant()'s
        if not same(actual, e + offset):
            continue
        like = ""
        for name, vector in (vectors or {}).items():
            v = vector.detach().double().flatten()
            if v.numel() == size and float(v.abs().max()) > 0:
                times = float((flat * v).sum() / (v * v).sum())
                if same(actual, e + (times * v).reshape(offset.shape)):
                    shown = ("" if math.isclose(times, 1) else
                             MESSAGES["offset_times"].format(times=times))
                    like = MESSAGES["offset_like"].format(times=shown, name=name)
                    break
        return MESSAGES["offset_along"].format(axis=_axis_label(names[axis]), like=like)
    return None


# ------------------------------------------------------- the right values, another shape

def permuted(actual, expected, same, dims, axes=None):
    """The layout family for a result of another shape than the answer: its values are the
    answer's with the axes in another order (a transpose too many or too few), or the
    answer's entries read in another axis order and reshaped to the result's shape (a
    view without its transpose). None when neither fits (or the shapes agree)."""
    got, want = tuple(actual.shape), tuple(expected.shape)
    if got == want or actual.numel() != expected.numel() or expected.numel() < 2 \
            or expected.dim() > 5:
        return None
    names = axis_names(want, dims, axes)
    e = expected.detach()
    orders = [order for order in itertools.permutations(range(e.dim()))
              if order != tuple(range(e.dim()))]
    for order in orders:
        if tuple(want[k] for k in order) == got and same(actual, e.permute(order)):
            return MESSAGES["permuted"].format(
                got_axes=", ".join(names[k] for k in order), want_axes=", ".join(names))
    for order in orders:
        if same(actual, e.permute(order).reshape(got)):
            return MESSAGES["permuted_view"].format(
                order=", ".join(names[k] for k in order), got=got)
    # the same with one axis cut into two named factors (d_model as num_heads x head_dim):
    # the heads concatenated along another axis, a view that splits the wrong axis
    for i in range(e.dim()):
        for outer, inner, outer_name, inner_name in _factor_pairs(want[i], dims):
            fine = e.reshape(*want[:i], outer, inner, *want[i + 1:])
            if fine.dim() > 5:
                continue
            fine_names = names[:i] + [outer_name, inner_name] + names[i + 1:]
            for order in itertools.permutations(range(fine.dim())):
                moved = fine.permute(order)
                # (the axes moved but none merged: the unmerged-axis family, wrong_shape's)
                if order != tuple(range(fine.dim())) and tuple(moved.shape) != got and same(
                        actual, moved.reshape(got)):
                    return MESSAGES["permuted_view"].format(
                        order=", ".join(fine_names[k] for k in order), got=got)
    return None



def reduced_many(actual, expected, same, dims, axes=None):
    """The fewer-axes family for two or more axes: `actual` is `expected` averaged or summed
    over several of its axes (all of them: one number), the others kept in order (one axis
    less is fewer_axes()')."""
    got, want = tuple(actual.shape), tuple(expected.shape)
    if len(want) - len(got) < 2 or expected.dim() > 6:
        return None
    names = axis_names(want, dims, axes)
    e = expected.detach().to(actual.dtype)
    for dropped in itertools.combinations(range(len(want)), len(want) - len(got)):
        if tuple(size for k, size in enumerate(want) if k not in dropped) != got:
            continue
        for how, reduce in (("reduced_mean", e.mean), ("reduced_sum", e.sum)):
            if same(actual, reduce(dim=dropped)):
                words = MESSAGES["and_joiner"].join(_axis_label(names[k]) for k in dropped)
                return MESSAGES["reduced_many"].format(how=MESSAGES[how].format(axis=words))
    return None


# ------------------------------------------------ lines rescaled, indices reordered (any)

def rescaled_lines(actual, expected, same, dims, axes=None):
    """The rescaled-lines family: along one axis, every line of `actual` (the entries that
    share the indices of all other axes) is the matching line of `expected` times its own
    positive or negative factor, the factors not all alike (one factor is constant()'s): a
    normalisation along that axis left out, done over other entries, or with a denominator
    that does not match its numerator (exp(s - max) over sum exp(s))."""
    pair = _finite_lines(actual, expected, dims, axes)
    if pair is None:
        return None
    a, e, shape, names = pair
    for axis, size in enumerate(shape):
        if size < 2:
            continue
        norm = (e * e).sum(dim=axis, keepdim=True)
        if not bool((norm > 0).all()):
            continue
        factor = (a * e).sum(dim=axis, keepdim=True) / norm
        flat = factor.flatten()
        if float((flat - flat.mean()).abs().max()) <= 1e-6 * (1 + float(flat.abs().max())):
            continue   # one factor for all: constant()'s
        if not same(actual, e * factor):
            continue
        return MESSAGES["rescaled_lines"].format(axis=_axis_label(names[axis]),
                                                 low=float(flat.min()), high=float(flat.max()))
    return None


def indices_permuted(actual, expected, same, dims, axes=None, most=64):
    """The reordered-indices family: along one axis (at most `most` indices), every index of
    `actual` holds the entries of another index of `expected`, each index used once, not in
    the right order (the heads' blocks put back in another order, an index counted from the
    other end); the sentence says which index went where. (A whole axis reversed, or its
    factors interleaved, is other_layout()'s.)"""
    shape = tuple(expected.shape)
    if tuple(actual.shape) != shape or expected.dim() == 0:
        return None
    names = axis_names(shape, dims, axes)
    for axis, size in enumerate(shape):
        if not 2 <= size <= most:
            continue
        found = []
        for i in range(size):
            got = actual.select(axis, i)
            order = [i] + [j for j in range(size) if j != i]
            match = next((j for j in order if j not in found
                          and same(got, expected.select(axis, j))), None)
            if match is None:
                break
            found.append(match)
        if len(found) != size or found == list(range(size)):
            continue
        moved = [MESSAGES["index_moved"].format(index=i, belongs=j)
                 for i, j in enumerate(found) if i != j]
        moves = ", ".join(moved[:6]) + (", ..." if len(moved) > 6 else "")
        return MESSAGES["indices_permuted"].format(axis=_axis_label(names[axis]), moves=moves)
    return None


def reshaped_in_place(what, before, after, dims, axes=None):
    """The in-place family for an argument whose shape the call changed (a transpose_ of the
    input): `after` (as the student's call left it) is a tensor of another shape than
    `before`; the sentence names the axes by the exercise's quantities. None otherwise
    (changed_in_place() counts changed entries of one shape)."""
    if not (isinstance(after, torch.Tensor) and isinstance(before, torch.Tensor)) \
            or tuple(after.shape) == tuple(before.shape):
        return None
    return MESSAGES["in_place_shape"].format(
        what=what, got=tuple(after.shape), want=tuple(before.shape),
        words=wrong_shape(tuple(after.shape), tuple(before.shape), dims, axes))


def unrepeatable(what, first, second, same):
    """The randomness family: two calls with the same inputs (and the module in eval mode)
    gave results `first` and `second` that differ beyond the check's tolerance (same(a, b));
    `what` names them ("outputs"). None when they agree or are no tensors of one shape."""
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)) \
            or tuple(first.shape) != tuple(second.shape) or same(first, second):
        return None
    # (no count of the entries that differ: it follows the random state, and the kit's
    # message must be the grader's)
    return MESSAGES["unrepeatable"].format(what=what)


def _none_as_object(message):
    """error_reason's sentence for a None used as an object that has a length (len() of
    it): an argument left at None that the function should have replaced by a fresh object
    of its own (a cache); "" for any other NoneType error."""
    return MESSAGES["error_none_object"] if "'NoneType' has no len()" in message else ""


def _none_on_line(message, code):
    """"; on that line, `bias` is None": the names on the student's line `code` that the
    NoneType error `message` can be about (the object of the missing attribute, or what is
    subscripted); "" where the line names none."""
    found = re.search(r"'NoneType' object has no attribute '(\w+)'", message)
    if found:
        names = re.findall(r"([A-Za-z_][\w.]*)\." + re.escape(found.group(1)) + r"\b", code or "")
    elif "'NoneType' object is not subscriptable" in message:
        names = re.findall(r"([A-Za-z_][\w.]*)\[", code or "")
    else:
        return ""
    names = list(dict.fromkeys(names))
    if len(names) == 1:
        return MESSAGES["error_none_name"].format(name=names[0])
    return MESSAGES["error_none_names"].format(
        names=", ".join(f"`{name}`" for name in names)) if names else ""
# --------------------------------------------------- a triangle of the other kind (chapter 4)

def _bool_masks(actual, expected):
    """(actual, expected) as bool tensors on the CPU when both are 0/1 masks of one shape
    of at least two axes, else None."""
    if tuple(actual.shape) != tuple(expected.shape) or expected.dim() < 2:
        return None
    a, e = actual.detach(), expected.detach()
    if not (_binary(a) and _binary(e)):
        return None
    return a.bool().cpu(), e.bool().cpu()


def _triangle_rule(kind, diagonal):
    """"j <= i + 2" for ("tril", 2): where a triangle of `kind` is True (i the row, j the
    column)."""
    shift = f" + {diagonal}" if diagonal > 0 else f" - {-diagonal}" if diagonal < 0 else ""
    return f"j {'<=' if kind == 'tril' else '>='} i{shift}"


def triangle_kind(actual, expected, dims, axes=None):
    """The triangle family, for 0/1 masks of one shape (..., R, C) that are both triangles
    of ones, the same in every leading index: the upper one (triu) where the lower one
    (tril) is right, or the reverse, whatever their diagonals (a square one with the same
    diagonal is also other_layout's swap of the two axes, tried before)."""
    masks = _bool_masks(actual, expected)
    if masks is None:
        return None
    a, e = masks
    if any(bool(m.all()) or not bool(m.any()) for m in (a, e)):
        return None   # all True or all False: a triangle of either kind, no triangle to name
    got, want = _triangle(a), _triangle(e)
    if not (got and want) or got[0] == want[0]:
        return None
    names = axis_names(tuple(e.shape), dims, axes)
    words = {"tril": ("a", MESSAGES["triangle_lower"]), "triu": ("an", MESSAGES["triangle_upper"])}
    return MESSAGES["triangle"].format(
        got_article=words[got[0]][0], got=words[got[0]][1], want_article=words[want[0]][0],
        want=words[want[0]][1], rule_got=_triangle_rule(*got), rule_want=_triangle_rule(*want),
        col=names[-1], row=names[-2])


def more_error_reasons(message):
    """What two more errors mean, for any exercise: an index with more axes than the tensor
    has, and arithmetic (- or 1 - x) on a bool tensor. None for any other error."""
    found = re.search(r"too many indices for tensor of dimension (\d+)", message or "")
    if found:
        return MESSAGES["error_too_many_indices"].format(rank=found.group(1))
    if re.search(r"(Subtraction|Negation), the `-` operator, (with|on) a bool tensor",
                 message or ""):
        return MESSAGES["error_bool_arithmetic"]
    return None


# ---------------------------------------------------------------- 1 - x (chapter 5)

def one_minus(actual, expected, same):
    """The complement family for values: actual = 1 - expected (a distance returned for a
    similarity, 1 - p for p), where expected is not a constant (that is constant()'s)."""
    if tuple(actual.shape) != tuple(expected.shape) or expected.numel() < 2:
        return None
    e = expected.detach().double()
    if float(e.max() - e.min()) == 0 or not same(actual, 1 - e):
        return None
    return MESSAGES["one_minus"]


# ------------------------------------- the likely cause of an error, from the student's line

_TRANSPOSES = ("transpose", "swapaxes", "swapdims", "permute")
_PRODUCTS = ("matmul", "bmm", "mm")
_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)


def _line_tree(code):
    """The student's line `code` (one line of their cell) as an ast tree, or None where it
    does not parse alone (an `if ...:` head, or a bracket closed on the next line)."""
    text = (code or "").strip()
    for candidate in (text, re.sub(r"^(el)?if\b|^while\b|:$", "", text).strip()):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def _calls_named(tree, names):
    """The calls of `tree` whose function is one of `names` (x.name(...) or torch.name(...))."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in names]


def _products(tree):
    """[(A, B)] of the matrix products on the line: A @ B, torch.matmul(A, B), A.matmul(B)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append((node.left, node.right))
    for call in _calls_named(tree, _PRODUCTS):
        if len(call.args) == 2:
            found.append(tuple(call.args))
        elif len(call.args) == 1 and isinstance(call.func, ast.Attribute):
            found.append((call.func.value, call.args[0]))
    return found


def _integer(node):
    """The int a node of the line stands for (2, -1), or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _integer(node.operand)
        return None if value is None else -value
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None


def _transposed_cause(operand, left, right, dims):
    """The sentence on the right operand of a failed product: not transposed, transposed with
    axes that are the last two only for a given number of axes, .T, or a transpose too many."""
    text = ast.unparse(operand)
    if isinstance(operand, ast.Attribute) and operand.attr == "T":
        return MESSAGES["cause_transpose_all"].format(operand=text)
    calls = [c for c in _calls_named(operand, _TRANSPOSES) if isinstance(c.func, ast.Attribute)]
    sized = {"left": left, "left_is": _product_name(left, dims),
             "right": right, "right_is": _product_name(right, dims)}
    if not calls:
        return MESSAGES["cause_untransposed"].format(operand=text, **sized)
    axes = [_integer(a) for a in calls[0].args]
    if (calls[0].func.attr != "permute" and len(axes) == 2 and None not in axes
            and min(axes) >= 0):
        return MESSAGES["cause_transposed_axes"].format(
            operand=text, first=axes[0], second=axes[1], rank=max(axes) + 1)
    return MESSAGES["cause_transposed_extra"].format(operand=text, **sized)


def _size_pair_cause(a, b, dims):
    """What two sizes that met where they should agree tell, where they are quantities that
    go together: num_kv_heads against num_heads (the key/value heads not repeated), and a
    size that is a named factor times the other (an axis split in two where one is
    expected, or not split); None otherwise."""
    names_of = {size: [n for n, v in dims.items() if v == size] for size in (a, b)}
    for kv, heads in ((a, b), (b, a)):
        if "num_kv_heads" in names_of[kv] and "num_heads" in names_of[heads] and kv != heads:
            return MESSAGES["cause_repeat"].format(kv=kv, heads=heads)
    small, big = sorted((a, b))
    if small < 2 or big % small or not (names_of[small] and names_of[big]):
        return None
    factor = big // small
    if factor < 2 or not _quantity(factor, dims):
        return None
    if "head_dim" in names_of[small] and dims.get("num_heads") == factor:
        return MESSAGES["cause_heads"].format(small=small, big=big, big_name=names_of[big][0])
    return MESSAGES["cause_split"].format(big=big, big_is=_quantity(big, dims), factor=factor,
                                          factor_is=_quantity(factor, dims), small=small,
                                          small_is=_quantity(small, dims))


def _batch_pair_cause(a, b, dims):
    """_size_pair_cause() of two batch sizes into which a product flattened its leading axes
    (batch * num_heads against batch * num_kv_heads): tried as they are, then with a named
    quantity that divides both divided out."""
    for common in [1] + sorted({v for v in dims.values() if v > 1 and not a % v and not b % v}):
        cause = _size_pair_cause(a // common, b // common, dims)
        if cause:
            return cause
    return None


def _cause_product(message, dims, tree):
    """A failed matrix product: what the operands on the line show (the right operand not
    transposed, transposed with other axes, or once too often; a layer given the wrong
    features), and what the two sizes are, where they are quantities that go together."""
    found = re.search(r"Expected size for first two dimensions of batch2 tensor to be: "
                      r"\[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]", message)
    if found and found.group(1) != found.group(3):   # batch sizes (batch axes flattened)
        return _batch_pair_cause(int(found.group(1)), int(found.group(3)), dims)
    if found:
        left, right = int(found.group(2)), int(found.group(4))
    else:
        found = re.search(r"mat1 and mat2 shapes cannot be multiplied \(\d+x(\d+) and "
                          r"(\d+)x\d+\)", message)
        if not found:
            return None
        left, right = map(int, found.groups())
    causes = []
    products = _products(tree) if tree else []
    if len(products) == 1:
        causes.append(_transposed_cause(products[0][1], left, right, dims))
    elif tree and not products:
        # a module called on one tensor (self.out_proj(x)): an attribute no tensor has
        layers = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and len(c.args) == 1
                  and isinstance(c.func, ast.Attribute)
                  and isinstance(c.func.value, (ast.Name, ast.Attribute))
                  and not hasattr(torch.Tensor, c.func.attr)]
        if len(layers) == 1:
            causes.append(MESSAGES["cause_layer"].format(
                layer=ast.unparse(layers[0].func), left=left, right=right,
                left_is=_product_name(left, dims), right_is=_product_name(right, dims)))
        elif _called_inside(tree):
            causes.append(MESSAGES["cause_inner"].format(
                call=_called_inside(tree), left=left, right=right,
                left_is=_product_name(left, dims), right_is=_product_name(right, dims)))
    pair = _size_pair_cause(left, right, dims)
    return "; ".join(causes + ([pair] if pair else [])) or None


def _mask_operand(tree):
    """True when the line applies a mask: masked_fill / where, or an operand named *mask*."""
    return bool(_calls_named(tree, ("masked_fill", "masked_fill_", "where"))) or any(
        "mask" in getattr(node, "id", getattr(node, "attr", "")).lower()
        for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute)))


def _cause_broadcast(message, dims, tree):
    """Sizes that do not broadcast: a product whose axes before the last two differ, a mask
    of the wrong shape, quantities that go together, an axis missing (or two vectors where
    a table of pairs is meant)."""
    found = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                      r"\((\d+)\) at non-singleton dimension (\d+)", message)
    if not found:
        return None
    left, right, axis = map(int, found.groups())
    sized = {"left": left, "left_is": _product_name(left, dims),
             "right": right, "right_is": _product_name(right, dims)}
    if tree is not None and _no_keepdim_in(tree):
        return None   # error_reason() names the reduction without keepdim=True
    pair = _size_pair_cause(left, right, dims)
    products = _products(tree) if tree else []
    if products and not any(isinstance(n, ast.BinOp) and isinstance(n.op, _ELEMENTWISE)
                            for n in ast.walk(tree)):
        causes = [MESSAGES["cause_product_batch"].format(**sized)]
        for _, operand in products:
            transposed = [c for c in _calls_named(operand, ("transpose",))
                          if all((_integer(a) or 0) >= 0 for a in c.args)]
            if transposed or (isinstance(operand, ast.Attribute) and operand.attr == "T"):
                causes.append(_transposed_cause(operand, left, right, dims))
        return "; ".join(causes + ([pair] if pair else []))
    if pair:
        return pair + _whole_operand(tree, left, right, dims)
    inner = _called_inside(tree)
    if inner:
        return MESSAGES["cause_inner"].format(call=inner, **sized)
    if tree is not None and _mask_operand(tree):
        return MESSAGES["cause_mask"].format(**sized)
    if axis == 0 and (_quantity(left, dims) or _quantity(right, dims)):
        return MESSAGES["cause_outer"].format(**sized)
    if not (_quantity(left, dims) and _quantity(right, dims)):
        return None
    if tree is not None and tree.body and not _drops_an_axis(tree):
        return MESSAGES["cause_size_differs"].format(**sized)
    return MESSAGES["cause_missing_axis"].format(**sized)


def _called_inside(tree):
    """The function the line calls (`scaled_dot_product_attention`) where the line itself
    does no operation that can fail on sizes (no arithmetic, product, comparison or
    entry-by-entry call of torch's): the error came from inside that function, so the
    tensors given to it are not as it documents. None otherwise."""
    if tree is None or not tree.body:
        return None
    if any(isinstance(node, ast.Compare) or (isinstance(node, ast.BinOp) and isinstance(
            node.op, (*_ELEMENTWISE, ast.MatMult))) for node in ast.walk(tree)):
        return None
    if _calls_named(tree, (*_ENTRYWISE_CALLS, *_PRODUCTS, "einsum", "cat", "stack", "expand",
                           "view", "reshape", "masked_fill_", "copy_")):
        return None
    functions = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and (isinstance(node.func, ast.Name) or (isinstance(node.func, ast.Attribute)
                      and not _is_torch(node.func) and not hasattr(torch.Tensor,
                                                                   node.func.attr)))]
    return ast.unparse(functions[0]) if functions else None


def _whole_operand(tree, left, right, dims):
    """"; here `bias` brings all 12 = d_model entries ...": for one head's head_dim entries
    (tensor a of the error, the left operand) meeting num_heads * head_dim (b, the right), on
    a line with one entry-by-entry operation, the operand that brings them all; ""
    otherwise."""
    head_dim, heads = dims.get("head_dim"), dims.get("num_heads")
    operations = [node for node in ast.walk(tree) if isinstance(node, ast.BinOp)
                  and isinstance(node.op, _ELEMENTWISE)] if tree is not None else []
    if len(operations) != 1 or not head_dim or not heads or \
            sorted((left, right)) != [head_dim, head_dim * heads]:
        return ""
    operand = operations[0].left if left > right else operations[0].right
    return MESSAGES["cause_heads_operand"].format(
        operand=ast.unparse(operand), big=max(left, right),
        big_is=_quantity(max(left, right), dims))


def _drops_an_axis(tree):
    """True when the line can give a tensor fewer axes than its operand has: an integer
    index (x[:, 0]), a squeeze or select, a reduction without keepdim=True."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(not isinstance(item, ast.Slice) and (_integer(item) is not None
                                                        or isinstance(item, ast.Name))
                   for item in items):
                return True
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", None)) in ("squeeze", "select", *_REDUCTIONS):
            if not any(k.arg == "keepdim" for k in node.keywords):
                return True
    return False


def _cause_expand(message, dims, tree):
    """An expand whose target sizes are in another order than the tensor's axes: the order
    that keeps every existing size in its place."""
    found = re.search(r"The expanded size of the tensor \(\d+\) must match the existing size "
                      r"\(\d+\).*Target sizes: \[([-\d, ]+)\]\.\s+Tensor sizes: \[([\d, ]+)\]",
                      message, re.S)
    if not found:
        return None
    target = [int(s) for s in found.group(1).split(",")]
    tensor = [int(s) for s in found.group(2).split(",")]
    if len(target) != len(tensor) or 1 not in tensor:
        return None
    spare = list(target)
    for size in tensor:
        if size != 1:
            if size not in spare:
                return None
            spare.remove(size)
    fill = iter(spare)
    fixed = [size if size != 1 else next(fill) for size in tensor]
    if fixed == target:
        return None
    return MESSAGES["cause_expand_order"].format(
        ones=", ".join(str(k) for k, s in enumerate(tensor) if s == 1),
        target=_sizes_text(target, dims), fixed=_sizes_text(fixed, dims))


def _viewed_to_shape_of(tree):
    """(the tensor viewed, the other tensor) where the line views or reshapes a tensor to
    another's .shape (`mask.view(scores.shape)`), else None."""
    for call in _calls_named(tree, ("view", "reshape")) if tree else []:
        if (isinstance(call.func, ast.Attribute) and len(call.args) == 1
                and isinstance(call.args[0], ast.Attribute) and call.args[0].attr == "shape"):
            tensor, other = ast.unparse(call.func.value), ast.unparse(call.args[0].value)
            if tensor != other:
                return tensor, other
    return None


def _cause_view(message, dims, tree):
    """A view to another tensor's shape that holds a multiple of the entries: a broadcast
    (or expand) was meant, not a view."""
    found = re.search(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", message)
    pair = _viewed_to_shape_of(tree)
    if not (found and pair):
        return None
    want, have = math.prod(int(s) for s in found.group(1).split(",")), int(found.group(2))
    if have < 1 or want <= have or want % have:
        return None
    return MESSAGES["cause_view_grow"].format(tensor=pair[0], other=pair[1], have=have,
                                              times=want // have)


def _cause_named_shapes(message, dims, tree):
    """An error whose message quotes the shapes of named tensors ("query (2, 4, 6, 4), key
    (2, 2, 6, 4)"): what the first sizes that differ between two of one rank tell."""
    shapes = [tuple(int(s) for s in found.split(","))
              for found in re.findall(r"\w+ \((\d+(?:, \d+)+)\)", message)]
    for first, second in itertools.combinations(shapes, 2):
        if len(first) == len(second):
            for a, b in zip(first, second):
                if a != b and a > 1 and b > 1:
                    cause = _size_pair_cause(a, b, dims)
                    if cause:
                        return cause
    return None


def _cause_arguments(message, dims, tree):
    """A float used as an index or a slice bound; a reduction given two axes as two
    arguments (the second is read as keepdim)."""
    if re.search(r"slice indices must be integers|only integers, slices .* are valid "
                 r"indices", message):
        return MESSAGES["cause_float_index"]
    found = re.search(r"(\w+)\(\): argument 'keepdim' \(position 2\) must be bool, not int",
                      message)
    if found and tree is not None:
        for call in _calls_named(tree, (found.group(1),)):
            axes = [_integer(a) for a in call.args]
            if len(axes) == 2 and None not in axes:
                return MESSAGES["cause_second_axis"].format(call=found.group(1), first=axes[0],
                                                            second=axes[1])
    return None


def _cause_axis_or_index(message, dims, tree):
    """An axis counted from the front past the tensor's axes; an index one past the end (an
    off-by-one) or further; a norm built for another size; a shape unpacked into too many
    or too few names."""
    found = re.search(r"Dimension out of range \(expected to be in range of \[-?\d+, "
                      r"(-?\d+)\], but got (\d+)\)", message)
    if found and tree is not None:
        high, got = map(int, found.groups())
        calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and got in
                 [_integer(a) for a in [*c.args, *(k.value for k in c.keywords)]]]
        if calls:
            return MESSAGES["cause_axis_from_front"].format(
                call=ast.unparse(calls[-1]), got=got, rank=high + 1)
    found = re.search(r"index (\d+) is out of bounds for dimension \d+ with size (\d+)", message)
    if found:
        index, size = map(int, found.groups())
        fields = {"index": index, "size": size, "size_is": _product_name(size, dims),
                  "last": size - 1}
        if index == size:
            return MESSAGES["cause_index_end"].format(**fields) + \
                MESSAGES["cause_index_other_axis"]
        return MESSAGES["cause_index_beyond"].format(**fields)
    found = re.search(r"Given normalized_shape=\[(\d+)\], expected input with shape "
                      r"\[\*,? ?\d+\], but got input of size ?\[([\d, ]+)\]", message)
    if found:
        built, got = int(found.group(1)), int(found.group(2).split(",")[-1])
        names = [n for n, v in dims.items() if v == got]
        return MESSAGES["cause_norm_size"].format(
            built=built, built_is=_quantity(built, dims), got=got, got_is=_quantity(got, dims),
            got_name=names[0] if names else got)
    found = re.search(r"(not enough|too many) values to unpack \(expected (\d+)(?:, got "
                      r"(\d+))?\)", message)
    if found and tree is not None:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
                want = int(found.group(2))
                got = found.group(3) or MESSAGES["unpack_more"].format(want=want)
                return MESSAGES["cause_unpack_shape"].format(
                    tensor=ast.unparse(node.value.value), want=want, got=got)
    if found and found.group(1) == "not enough" and tree is not None:
        return _indexed_away(tree)
    return None


def _indexed_away(tree):
    """The sentence on an integer index of the line (`tokens[:, -1]`), which removes the
    axis it indexes: the tensor it gives has an axis fewer than one sliced (-1:); None where
    the line has no such index."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(_integer(item) is not None for item in items):
                return MESSAGES["cause_indexed_away"].format(expression=ast.unparse(node))
    return None


_TORCH_CALL = re.compile(r"^(\w+)\(\) got an unexpected keyword argument '(\w+)'")


def _library_keyword(message, code):
    """An unexpected keyword given to a call the student's line makes on a tensor or on
    torch (x.tril(dtype=...), torch.softmax(x, axis=-1)): that function is PyTorch's, and
    the keyword belongs elsewhere; None where the call is not on the line as such."""
    found = _TORCH_CALL.search(message or "")
    tree = _line_tree(code)
    if not found or tree is None:
        return None
    function, keyword = found.groups()
    for call in _calls_named(tree, (function,)):
        if isinstance(call.func, ast.Attribute) and any(k.arg == keyword
                                                        for k in call.keywords):
            return MESSAGES["error_library_keyword"].format(function=function,
                                                            keyword=keyword)
    return None


def call_reasons(message, code=""):
    """What errors about a call's arguments mean, for any exercise: a function given more
    positional arguments than it takes, torch.cat/stack given tensors one by one, tensors
    of different numbers of axes joined, cross_entropy's classes not on axis 1, a target
    out of the classes' range (-100: the default ignore_index). None for any other error."""
    message = message or ""
    found = re.search(r"(\w+)\(\) takes (\d+) positional arguments? but (\d+) (?:were|was) "
                      r"given", message)
    if found:
        return MESSAGES["error_too_many_arguments"].format(
            call=found.group(1), want=found.group(2), got=found.group(3))
    found = re.search(r"(cat|stack|concat|concatenate|hstack|vstack)\(\): argument 'tensors' "
                      r"\(position 1\) must be tuple of Tensors, not Tensor", message)
    if found:
        return MESSAGES["error_join_list"].format(call=found.group(1))
    found = re.search(r"Tensors must have same number of dimensions: got (\d+) and (\d+)",
                      message)
    if found:
        tree = _line_tree(code)
        dropped = _no_keepdim_call(tree) if tree is not None else None
        return MESSAGES["error_join_ranks"].format(first=found.group(1),
                                                   second=found.group(2)) + (
            MESSAGES["error_join_dropped"].format(call=dropped) if dropped else "")
    found = re.search(r"(\w+)\(\) received an invalid combination of arguments - got "
                      r"\(([^)]*)\), but expected one of:(.*)", message, re.S)
    if found:
        given = [a for a in found.group(2).split(",") if a.strip() and "=" not in a]
        forms = re.findall(r"\* \(([^)]*)\)", found.group(3))
        positional = [len([a for a in form.split("*")[0].split(",") if a.strip()])
                      for form in forms]
        keywords = dict.fromkeys(re.findall(r"(\w+) =", " ".join(
            form.split("*", 1)[1] for form in forms if "*" in form)))
        if positional and len(given) > max(positional) and keywords:
            return MESSAGES["error_positional"].format(
                call=found.group(1), got=len(given), most=max(positional),
                keywords=", ".join(f"{k}=..." for k in keywords))
    found = re.search(r"Expected target size \[([\d, ]+)\], got \[([\d, ]+)\]", message)
    if found:
        return MESSAGES["error_target_size"].format(want=found.group(1), got=found.group(2))
    found = re.search(r"Target (-?\d+) is out of bounds", message)
    if found:
        return MESSAGES["error_target_ignored" if int(found.group(1)) < 0
                        else "error_target_class"].format(target=found.group(1))
    return None


def _no_keepdim_call(tree):
    """The first reduction on the line that drops its axis (an axis given, no keepdim):
    argmax(-1), x.sum(dim=1); None."""
    for call in _calls_named(tree, (*_REDUCTIONS, "argmax", "argmin")):
        keywords = {k.arg for k in call.keywords}
        method = isinstance(call.func, ast.Attribute) and not _is_torch(call.func)
        if ("dim" in keywords or len(call.args) >= (1 if method else 2)) \
                and "keepdim" not in keywords:
            return ast.unparse(call)
    return None


def error_cause(message, dims, code="", line=""):
    """The likely mistake behind an error the student's code raised, in the exercise's words,
    from the sizes in PyTorch's `message` (each named by the quantity it equals, see dims)
    and the student's line `code` (parsed: which operation raised, on which operands); None
    where neither shows one. A sentence says what the sizes and the line show, and names
    the mistake that gives them; raised_cause calls it likely. line: the shapes on the
    raising line (checks.operations.line_shapes), read first where they show the cause."""
    tree, report = _line_tree(code), _line_report(line)
    cause = _cause_line_shapes(message or "", dims or {}, tree, report)
    if cause:
        return cause
    for attempt in (_cause_product, _cause_expand, _cause_view, _cause_broadcast,
                    _cause_named_shapes, _cause_arguments, _cause_axis_or_index):
        cause = attempt(message or "", dims or {}, tree)
        if cause:
            return cause
    # the weaker guess from the line's shapes, where nothing above names a cause
    return _shapes_times(message or "", dims or {}, tree, *report[:2])


_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "logsumexp", "norm", "prod")
# entry-by-entry operations written as calls: torch.div(e, s), e.sub(m), torch.where(...)
_ENTRYWISE_CALLS = ("add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "subtract",
                    "divide", "multiply", "where", "masked_fill", "eq", "ne", "lt", "le", "gt",
                    "ge", "maximum", "minimum")


def _is_torch(function):
    """True for torch.name (or F.name), False for a method called on a tensor (x.name)."""
    return isinstance(function.value, ast.Name) and function.value.id in ("torch", "F")


def _no_keepdim_in(tree):
    """The first reduction with an axis and no keepdim on the line that is an operand of an
    entry-by-entry operation (exp / exp.sum(-1)): the one whose dropped axis can make it
    fail to broadcast; None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ELEMENTWISE):
            operands = (node.left, node.right)
        elif isinstance(node, ast.Compare):
            operands = (node.left, *node.comparators)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in _ENTRYWISE_CALLS:
            operands = (*node.args, *([node.func.value] if not _is_torch(node.func) else []))
        else:
            continue
        for operand in operands:
            for call in _calls_named(operand, _REDUCTIONS):
                keywords = {k.arg for k in call.keywords}
                method = isinstance(call.func, ast.Attribute) and not _is_torch(call.func)
                has_axis = "dim" in keywords or len(call.args) >= (1 if method else 2)
                if has_axis and "keepdim" not in keywords:   # '.sum(dim=-1)' as it is written
                    arguments = ", ".join(map(ast.unparse, [*call.args, *call.keywords]))
                    return f".{call.func.attr}({arguments})" if method else ast.unparse(call)
    return None


# ------------------------------------------------- float32 rounding in a float64 test

def float32_rounding(actual, expected):
    """The precision family: in a float64 test (`expected` float64, not whole numbers),
    `actual` differs from `expected` by about float32's rounding and no more (largest error
    between 1e-9 and 1e-5 of the largest entry; float32 keeps about 7 significant digits,
    float64 about 16): a step computed in float32."""
    if (tuple(actual.shape) != tuple(expected.shape) or expected.dtype != torch.float64
            or expected.numel() == 0):
        return None
    a, e = actual.detach().double(), expected.detach()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(e).all())):
        return None
    top = float(e.abs().max())
    if top == 0 or bool((e == e.round()).all()):
        return None   # zeros, or counts: whole numbers have no float32 rounding to show
    error = float((a - e).abs().max()) / top
    if not 1e-9 < error <= 1e-5:
        return None
    return MESSAGES["float32_rounding"].format(error=error)


# ------------------------------------------------- a formula step that gives NaN or inf

def step_nonfinite(actual, mistakes, same):
    """The formula family for a result that holds NaN or inf where the right answer is
    finite: which of `mistakes` ({sentence: output}, Formula.mistakes) has NaN and inf of
    the same kind at the same entries and equals `actual` at all the others (at least one):
    a step done another way that breaks on some inputs (log w without its factor w is -inf
    where w is 0), named where the non-finite family alone would only say where."""
    a = actual.detach()
    bad = ~torch.isfinite(a)
    if not bool(bad.any()) or bool(bad.all()):
        return None
    found = []
    for sentence, value in (mistakes or {}).items():
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(a.shape):
            continue
        v = value.detach().to(device=a.device, dtype=torch.float64)
        a64 = a.double()
        if not (torch.equal(~torch.isfinite(v), bad)
                and torch.equal(torch.isnan(v), torch.isnan(a64))
                and torch.equal(v[bad & ~torch.isnan(v)], a64[bad & ~torch.isnan(a64)])):
            continue
        if same(a64[~bad], v[~bad]):
            found.append(sentence)
    if not found:
        return None
    step = found[0] if len(found) == 1 else MESSAGES["step_nonfinite_or"].join(found)
    return MESSAGES["step_nonfinite"].format(step=step, count=int(bad.sum()), total=a.numel())


# ---------------------------------------------------------- a part of one axis (any exercise)

def part_of(actual, expected, same, dims, axes=None):
    """The part family, for a result of another shape: `actual` is `expected` cut down along
    one axis to its first or its last entries (the last position only, the first row), every
    other axis as expected; same(a, b): equal within the check's tolerance. None otherwise
    (a run in the middle is left out: a repeat by the wrong count matches one by chance)."""
    got, want = tuple(actual.shape), tuple(expected.shape)
    if len(got) != len(want) or got == want:
        return None
    differ = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
    if len(differ) != 1 or not 0 < got[differ[0]] < want[differ[0]]:
        return None
    axis, count, total = differ[0], got[differ[0]], want[differ[0]]
    for start, key in ((0, "part_first"), (total - count, "part_last")):
        if same(actual, expected.narrow(axis, start, count)):
            which = MESSAGES[key].format(count=count)
            return MESSAGES["part_of"].format(
                which=which, total=total,
                axis=_axis_label(axis_names(want, dims, axes)[axis]))
    return None


# ------------------------------------------------- the student's code traced (any exercise)

def _layouts(value, shape):
    """`value` (a step's value) in each usual layout that has `shape`, the shape of a tensor
    of the student's: as it is, its last two axes swapped, and for one split into heads
    (B, num_heads, L, head_dim): the heads after the positions (B, L, num_heads, head_dim),
    those merged (B, L, d_model), or the batch and heads in one axis (B * num_heads, L,
    head_dim); a (B, L, d_model) value cut into (B, L, num_heads, head_dim)."""
    shape = tuple(shape)
    forms = [value]
    if value.dim() >= 2:
        forms.append(value.transpose(-2, -1))
    if value.dim() == 4:
        forms += [value.transpose(1, 2), value.transpose(1, 2).flatten(2), value.flatten(0, 1)]
    if (value.dim() == 3 and len(shape) == 4 and shape[:2] == tuple(value.shape[:2])
            and math.prod(shape) == value.numel()):
        forms.append(value.reshape(shape))
    return [form for form in forms if tuple(form.shape) == shape]


def _reproduces(tensor, value, same):
    """The layout of `value` (_layouts) that `tensor` holds within the check's tolerance, or
    None."""
    for form in _layouts(value, tensor.shape):
        try:
            if same(tensor, form):
                return form
        except (RuntimeError, TypeError, ValueError):
            continue
    return None


def _step_tensors(value):
    """[(key or None, tensor)] of a step's value (Formula.values)."""
    if isinstance(value, dict):
        return [(key, tensor) for key, tensor in value.items()
                if isinstance(tensor, torch.Tensor)]
    return [(None, value)] if isinstance(value, torch.Tensor) else []


def _trace_hits(steps, trace, same):
    """[(step index, name, [(key, tensor)], [index of the first record that reproduces each
    tensor, or None])] of the steps that change something."""
    found = []
    for index, (name, value) in enumerate(steps):
        tensors = _step_tensors(value)
        if tensors:
            found.append((index, name, tensors,
                          [next((r for r, record in enumerate(trace) if _valued(record)
                                 and _reproduces(record[2], tensor, same) is not None), None)
                           for _key, tensor in tensors]))
    return found


def _added(tensor, form, held, same):
    """What `tensor` (a line's value) is `form` (the step's value) plus: the text of the
    first of `held` ([(text, tensor)]) that the difference equals, or None."""
    difference = tensor.double() - form.double()
    if not bool(difference.abs().amax() > 0):
        return None
    return next((text for text, value in held
                 if _reproduces(difference, value, same) is not None), None)


def _place(record):
    """(place, ": `code`" or "") of a trace record, for the trace family's templates."""
    code = record[1].replace("`", "'")
    return record[0], MESSAGES["trace_code"].format(code=code) if code else ""


def _departure(trace, start, candidates, hits, values, same, dims):
    """trace_at's text (and trace_how's, where a family says how) for the first record after
    `start` that none of the step values reproduces and that has the shape of one of
    `candidates` ([(step name, tensor)], in a usual layout), or ""."""
    every = [tensor for _index, _name, tensors, _ in hits for _key, tensor in tensors]
    for r in range(start + 1, len(trace)):
        line = trace[r][2]
        shaped = [(name, form) for name, tensor in candidates
                  for form in _layouts(tensor, line.shape)[:1]]
        if (not shaped or not _valued(trace[r])
                or any(_reproduces(line, tensor, same) is not None for tensor in every)):
            continue
        upstream = _read_wrong(trace, r, hits, every, same, dims, [
            (name, tensor.double()) for name, tensor in (values.get("inputs") or {}).items()
            if isinstance(tensor, torch.Tensor)])
        if upstream:
            return upstream
        place, code = _place(trace[r])
        text = MESSAGES["trace_at"].format(place=place, code=code)
        step, form = shaped[0]
        held = [(MESSAGES["trace_input"].format(name=name), tensor)
                for name, tensor in (values.get("inputs") or {}).items()
                if isinstance(tensor, torch.Tensor)]
        held += [(MESSAGES["trace_step_part"].format(step=name, key=key) if key
                  else MESSAGES["trace_step_value"].format(step=name), tensor)
                 for _index, name, tensors, _ in reversed(hits) for key, tensor in tensors]
        adds = _added(line, form, held, same)
        reason = (MESSAGES["trace_adds"].format(what=adds) if adds else
                  _transformed(line, form, values.get("inputs") or {}, same, dims))
        if not reason:
            wrong = ~torch.isclose(line.double(), form.double(), rtol=1e-3, atol=1e-3 * float(
                form.double().abs().amax().clamp(min=1e-12)))
            reason = explain(line.double(), form.double(), same, wrong, dims)
        return text + (MESSAGES["trace_how"].format(step=step, reason=reason) if reason else "")
    return ""


# the entry-by-entry functions a line may apply to a step's value: {name: function}
_TRACE_FUNCTIONS = {"exp": torch.exp, "log": torch.log, "relu": torch.relu,
                    "abs": torch.abs, "sqrt": torch.sqrt, "sigmoid": torch.sigmoid,
                    "tanh": torch.tanh, "1 / x": torch.reciprocal, "-x": torch.neg}
# the reductions a line may take out of a step's value along one axis (keepdim=True)
_TRACE_REDUCTIONS = {"maximum": lambda t, d: t.amax(dim=d, keepdim=True),
                     "minimum": lambda t, d: t.amin(dim=d, keepdim=True),
                     "mean": lambda t, d: t.mean(dim=d, keepdim=True),
                     "sum": lambda t, d: t.sum(dim=d, keepdim=True),
                     "norm": lambda t, d: t.norm(dim=d, keepdim=True)}


def _fits(line, candidate, same):
    try:
        return bool(torch.isfinite(candidate).all()) and same(line, candidate)
    except (RuntimeError, TypeError, ValueError):
        return False


def _transformed(line, form, inputs, same, dims):
    """How `line` (a value of the student's) is `form` (a step's value, same shape)
    transformed in a standard way the formula does not: squared, an entry-by-entry function
    (_TRACE_FUNCTIONS), a reduction along one axis subtracted or divided out
    (_TRACE_REDUCTIONS), or a
    weight among `inputs` ({name: tensor}; 2-D, nn.Linear's layout, with its bias
    "<name minus _w>_b" where there is one) applied once more; None otherwise."""
    value = form.double()
    if _fits(line, value ** 2, same):
        return MESSAGES["trace_square"]
    for name, function in _TRACE_FUNCTIONS.items():
        if _fits(line, function(value), same):
            return MESSAGES["trace_function"].format(function=name)
    names = axis_names(tuple(value.shape), dims)
    for reduction, reduce in _TRACE_REDUCTIONS.items():
        for axis in range(value.dim()):
            part = reduce(value, axis)
            for key, candidate in (("trace_minus", value - part), ("trace_divided", value / part)):
                if _fits(line, candidate, same):
                    return MESSAGES[key].format(reduction=MESSAGES[f"trace_{reduction}"],
                                                axis=_axis_label(names[axis]),
                                                dim=axis - value.dim())
    for name, weight in inputs.items():
        if weight.dim() == 2 and weight.shape[1] == value.shape[-1]:
            bias = inputs.get(name[:-2] + "_b") if name.endswith("_w") else None
            if _fits(line, torch.nn.functional.linear(value, weight.double(), None if bias is None
                                                      else bias.double()), same):
                return MESSAGES["trace_linear"].format(weight=name)
    return None


def traced(actual, values, traces, same, dims):
    """The trace family: where the student's code departs from the formula. `values`:
    {"steps": Formula.values() of the exercise's formula on the check's inputs, "inputs":
    {name: tensor}}; traces: the traces of the student's latest calls ([(place, code,
    tensor)] of the tensors their own lines computed, in order: checks.operations); same:
    equal within the check's tolerance; actual: the wrong result. In the trace that
    reproduces most steps, finds the last step whose value (every tensor it makes, in a
    usual layout) the student's code computed, and the next step, which none of its values
    is; then the first value computed after that step's which is none of the formula's (of
    the shape of that step's or the next one's), and how it differs where a family can say
    (explain(), or a value of the formula added to it). None where no step is reproduced:
    it claims only what the values show."""
    steps = values.get("steps") if isinstance(values, dict) else None
    if not steps or not traces:
        return None
    best = None
    for trace in traces:
        hits = _trace_hits(steps, trace, same)
        done = [hit for hit in hits if all(first is not None for first in hit[3])]
        if done and (best is None or len(done) >= len(best[2])):
            best = (trace, hits, done)
    if best is None:
        return None
    trace, hits, done = best
    last = done[-1]
    place, code = _place(trace[max(last[3])])
    later = [hit for hit in hits if hit[0] > last[0]]
    candidates = [(last[1], tensor) for _key, tensor in last[2]]
    if later:
        text = MESSAGES["trace_departs"].format(last=last[1], place=place, code=code,
                                                step=later[0][1])
        candidates += [(later[0][1], tensor) for _key, tensor in later[0][2]]
    elif _reproduces(actual, last[2][-1][1], same) is None:
        text = MESSAGES["trace_returned"].format(last=last[1], place=place, code=code)
    else:
        return None
    return text + _departure(trace, min(last[3]), candidates, hits, values, same, dims)


# ------------------------------- the likely cause of an error, from the shapes on its line

_MATMULS = ("matmul", "__matmul__", "bmm", "mm")
_JOINS = ("cat", "concat", "concatenate", "stack")


def _line_report(line):
    """(call, names, others) of checks.operations.line_shapes' JSON text: call [the torch
    function that raised, [shapes]] or None, names [(expression, shape)] of the line,
    others [(name, shape)] of its frame's other tensors; (None, [], []) where the text is
    not such a report. (It comes from the student's process: read, checked, never trusted
    beyond the words of a message.)"""
    try:
        report = json.loads(line) if isinstance(line, str) and 0 < len(line) <= 4000 else {}
    except ValueError:
        report = {}
    if not isinstance(report, dict):
        return None, [], []

    def shape(value):
        return (tuple(value) if isinstance(value, list) and len(value) <= 8 and all(
            isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 2**40
            for size in value) else None)
    call = report.get("call")
    if not (isinstance(call, list) and len(call) == 2 and isinstance(call[0], str)
            and isinstance(call[1], list) and len(call[1]) <= 8
            and all(shape(s) is not None for s in call[1])):
        call = None
    else:
        call = (call[0][:40], [shape(s) for s in call[1]])
    def entries(key):
        found = report.get(key)
        return [(entry[0][:80], shape(entry[1])) for entry in found[:8]
                if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and shape(entry[1]) is not None] if isinstance(found, list) else []
    return call, entries("names"), entries("others")


def _shape_text(shape, dims):
    """(4 = num_heads, 3 = head_dim): a shape with each size named by its quantity."""
    return "(" + _sizes_text(shape, dims) + ("," if len(shape) == 1 else "") + ")"


def _shape_of(expression, shape, dims):
    return MESSAGES["shape_of"].format(expression=expression, shape=_shape_text(shape, dims))


def _called_as(shape, names, dims, fallback=None):
    """How a message names the tensor of `shape` on the line: the one expression of `names`
    that has it (`mask` (3, 1, 7 = Lk, 5 = Lq)), else `fallback` with it, else the shape."""
    having = [expression for expression, seen in names if seen == tuple(shape)]
    if having:   # (of several of that shape, the first on the line: the shape is the same)
        return _shape_of(fallback if fallback in having else having[0], shape, dims)
    if fallback:
        return _shape_of(fallback, shape, dims)
    return _shape_text(shape, dims)


def _cause_line_shapes(message, dims, tree, report):
    """The likely cause of an error that the shapes on the raising line show (report:
    _line_report()), for any exercise; None where they show none."""
    call, names, others = report
    for attempt in (_shapes_product, _shapes_join, _shapes_broadcast, _shapes_view,
                    _shapes_unpack, _shapes_rows):
        cause = attempt(message, dims, tree, call, names)
        if cause:
            return cause
    return _shapes_axis(message, dims, names, others)


def _shapes_product(message, dims, tree, call, names):
    """A matrix product that failed: two operands of one shape (an entry-by-entry product
    meant), operands that fit in the other order, or an operand indexed out of a larger
    tensor (the reshape that made it)."""
    if not call or call[0] not in _MATMULS or len(call[1]) != 2 or not re.search(
            r"mat1 and mat2 shapes|first two dimensions of batch2", message):
        return None
    a, b = call[1]
    products = _products(tree) if tree is not None else []
    # (only a product the line itself makes, whose batch axes agree: its operands are named)
    if len(a) < 2 or len(b) < 2 or len(products) != 1 or any(
            x != y and 1 not in (x, y) for x, y in zip(a[-3::-1], b[-3::-1])):
        return None
    left, right = ast.unparse(products[0][0]), ast.unparse(products[0][1])
    if a == b:
        before = error_cause(message, dims, ast.unparse(tree) if tree is not None else "")
        return (f"{before}; " if before else "") + MESSAGES["cause_same_shape"].format(
            shape=_shape_text(a, dims))
    if b[-1] != a[-1] and b[-1] == a[-2] and a[-1] != b[-2]:
        return MESSAGES["cause_operand_order"].format(
            left=_called_as(a, names, dims, left), right=_called_as(b, names, dims, right))
    operand = products[0][1]
    if (b[-1] == a[-1] and isinstance(operand, ast.Subscript)
            and isinstance(operand.value, ast.Name)):
        whole = [(e, s) for e, s in names if e == operand.value.id and len(s) > len(b)]
        if whole:
            cause = error_cause(message, dims, ast.unparse(tree))
            return (cause or "") + MESSAGES["cause_indexed_operand"].format(
                operand=right, whole=_shape_of(*whole[0], dims), whole_name=whole[0][0])
    return None


def _shapes_join(message, dims, tree, call, names):
    """Tensors of different numbers of axes joined, one with an extra axis of size 1."""
    found = re.search(r"Tensors must have same number of dimensions: got (\d+) and (\d+)",
                      message)
    if not found or not call or len(call[1]) < 2:
        return None
    shapes = sorted(call[1], key=len)
    short, long = shapes[0], shapes[-1]
    if len(long) != len(short) + 1 or 1 not in long:
        return None
    seen = [e for e, s in names if 1 in s and len(s) == len(long) and s != long]
    return MESSAGES["cause_extra_unit_axis"].format(
        longer=_called_as(long, names, dims), shorter=_called_as(short, names, dims),
        seen=MESSAGES["cause_seen_unit_axis"].format(named=_shape_of(
            seen[0], dict(names)[seen[0]], dims)) if seen else "")


def _shapes_broadcast(message, dims, tree, call, names):
    """Two operands that do not broadcast, one the other transposed (its last two axes in
    the other order)."""
    found = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                      r"\((\d+)\) at non-singleton dimension (\d+)", message)
    if not found or not call:
        return None
    shapes = [s for s in call[1] if len(s) >= 1]
    for first, second in itertools.combinations(shapes, 2):
        if (len(first) >= 2 and len(second) >= 2 and first[-2:] == second[-2:][::-1]
                and first[-1] != first[-2]):
            return MESSAGES["cause_operand_transposed"].format(
                first=_called_as(second, names, dims), second=_called_as(first, names, dims))
    return None


def _shapes_times(message, dims, tree, call, names):
    """Two operands that do not broadcast where one has a whole multiple of the other's
    entries on the axis where they meet (tried after every other cause: a weaker guess)."""
    found = re.search(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                      r"\((\d+)\) at non-singleton dimension (\d+)", message)
    if not found or not call:
        return None
    size_a, size_b, axis = map(int, found.groups())
    shapes = [s for s in call[1] if len(s) >= 1]
    big, small = max(size_a, size_b), min(size_a, size_b)
    rank = max(len(s) for s in shapes) if shapes else 0
    if small < 2 or big % small or rank == 0:
        return None
    at = axis - rank   # the axis counted from the end, as broadcasting aligns them

    def holding(size):
        return [s for s in shapes if len(s) >= -at and s[at] == size]
    bigs, smalls = holding(big), holding(small)
    if len(bigs) != 1 or len(smalls) != 1:
        return None
    return MESSAGES["cause_operand_times"].format(
        big=_called_as(bigs[0], names, dims), small=_called_as(smalls[0], names, dims),
        times=big // small, axis=at, size=big, size_is=_quantity(big, dims), other=small,
        other_is=_quantity(small, dims))


def _shapes_view(message, dims, tree, call, names):
    """A view asked for fewer entries than the tensor holds, by a whole factor: the axis
    (after the sizes the view keeps) whose size divided by it fits, named by its quantity."""
    found = re.search(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", message)
    if not found or not call or not call[1]:
        return None
    sizes = [int(s) for s in found.group(1).split(",")]
    have, tensor = int(found.group(2)), call[1][0]
    want = math.prod(sizes)
    if -1 in sizes or want < 1 or have <= want or have % want or math.prod(tensor) != have:
        return None
    times, fits = have // want, []
    for size in dict.fromkeys(reversed(tensor)):   # the last axes first
        named = [n for n, v in dims.items() if v == size]
        if named and size % times == 0 and size // times > 1:
            fits.append(MESSAGES["view_fits"].format(size=size, size_is=_quantity(size, dims),
                                                     fits=size // times, name=named[0],
                                                     times=times))
    if not fits:
        return None
    return MESSAGES["cause_view_times"].format(tensor=_called_as(tensor, names, dims),
                                               times=times, want=want,
                                               fits=MESSAGES["or"].join(fits[:2]))


def _shapes_unpack(message, dims, tree, call, names):
    """A shape unpacked into another number of names than the tensor has axes."""
    found = re.search(r"(?:not enough|too many) values to unpack \(expected (\d+)", message)
    if not found or tree is None:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
            tensor = ast.unparse(node.value.value)
            shape = dict(names).get(tensor)
            if shape is not None and len(shape) != int(found.group(1)):
                more = error_cause(message, dims, ast.unparse(tree))
                return MESSAGES["cause_unpack_axes"].format(
                    tensor=_shape_of(tensor, shape, dims), rank=len(shape),
                    want=found.group(1)) + (f"; {more}" if more else "")
    return None


def _shapes_axis(message, dims, names, others):
    """An axis past the tensor's last, where a tensor on the line of that many axes has one
    whose size is a product of the exercise's quantities, or of neighbouring axes of another
    tensor of the frame (axes flattened into one)."""
    found = re.search(r"Dimension out of range \(expected to be in range of \[-?\d+, "
                      r"(-?\d+)\], but got -?\d+\)", message)
    if not found:
        return None
    rank = int(found.group(1)) + 1
    for expression, shape in names:
        if len(shape) != rank:
            continue
        for size in shape:
            product = _product_name(size, dims)
            if "*" not in product:
                product = next((MESSAGES["merged_from"].format(
                    sizes=_sizes_text(whole[k:m], dims, " * "),
                    tensor=_shape_of(name, whole, dims), first=k, last=m - 1)
                    for name, whole in names + others if name != expression
                    for k in range(len(whole)) for m in range(k + 2, len(whole) + 1)
                    if math.prod(whole[k:m]) == size and size > 1), "")
            if product:
                return MESSAGES["cause_merged_axes"].format(
                    tensor=_shape_of(expression, shape, dims), rank=rank, size=size,
                    size_is=product)
    return None


def _shapes_rows(message, dims, tree, call, names):
    """A loss given inputs and targets of different numbers of rows, where two tensors on
    the line give them through their leading axes: the axis where they differ."""
    found = re.search(r"Expected input batch_size \((\d+)\) to match target batch_size "
                      r"\((\d+)\)", message)
    if not found:
        return None
    left, right = map(int, found.groups())

    def leading(size):
        for expression, shape in names:
            for count in range(1, len(shape) + 1):
                if math.prod(shape[:count]) == size and count >= 2:
                    return expression, shape, shape[:count]
        return None
    first, second = leading(left), leading(right)
    if not first or not second or len(first[2]) != len(second[2]):
        return None
    differ = [k for k, (x, y) in enumerate(zip(first[2], second[2])) if x != y]
    if len(differ) != 1:
        return None
    one, two = first[2][differ[0]], second[2][differ[0]]
    return MESSAGES["cause_rows_differ"].format(
        first=_shape_of(*first[:2], dims), second=_shape_of(*second[:2], dims), left=left,
        right=right, axis=differ[0], one=one, two=two,
        by_one=MESSAGES["cause_rows_by_one"] if abs(one - two) == 1 else "")


# ------------------------------------------ the data flow of the trace, and shapes (any exercise)

def _valued(record):
    """Whether a trace record holds values a formula's step can have (floats, not a mask)."""
    return record[2].is_floating_point()


def _read_wrong(trace, r, hits, every, same, dims, inputs=(), depth=0):
    """trace_at's text, with trace_how's and trace_read_by's, for the earliest value of the
    student's that line `r` of `trace` reads (through the records it was made from) which
    none of the step values reproduces and which is a step's value in another layout or
    transformed in a standard way (other_layout, _transformed): the cause upstream of where
    the values show it; "" where there is none (or the trace has no data flow)."""
    if depth > 12 or len(trace[r]) < 5:
        return ""
    for _shape, source in trace[r][4]:
        if source < 0 or not _valued(trace[source]):
            continue
        value = trace[source][2].double()
        if any(_reproduces(value, tensor, same) is not None
               for tensor in every + [tensor for _name, tensor in inputs]):
            continue
        earlier = _read_wrong(trace, source, hits, every, same, dims, inputs, depth + 1)
        if earlier:
            return earlier
        against = [(MESSAGES["trace_how"], name, tensor) for _index, name, tensors, _
                   in reversed(hits) for _key, tensor in tensors]
        against += [(MESSAGES["trace_how_input"], name, tensor) for name, tensor in inputs]
        for how, name, tensor in against:
            for form in _layouts(tensor, value.shape)[:1]:
                form = form.double()
                reason = (other_layout(value, form, same, dims)
                          or _transformed(value, form, dict(inputs), same, dims))
                if reason:
                    place, code = _place(trace[source])
                    by, by_code = _place(trace[r])
                    return (MESSAGES["trace_at"].format(place=place, code=code)
                            + how.format(step=name, reason=reason)
                            + MESSAGES["trace_read_by"].format(place=by, code=by_code))
    return ""


def _merged_axes(got, want, want_names):
    """shape_merged_axes' sentence where `got` is `want` with two neighbouring axes merged
    into one, else None."""
    if len(got) + 1 != len(want):
        return None
    for i in range(len(got)):
        if (want[:i] + (want[i] * want[i + 1],) + want[i + 2:] == got
                and want[i] > 1 and want[i + 1] > 1):
            return MESSAGES["shape_merged_axes"].format(
                first=want_names[i], second=want_names[i + 1], size=got[i],
                want_rank=len(want), want_axes=", ".join(want_names))
    return None


def _maker(actual, traces):
    """(trace, index) of the record that computed `actual` (the last of the latest trace
    that holds its very values), or None."""
    got = actual.detach()
    for trace in reversed(traces or ()):
        for r in range(len(trace) - 1, -1, -1):
            value = trace[r][2]
            if (tuple(value.shape) == tuple(got.shape) and value.dtype == got.dtype
                    and bool(torch.equal(value.cpu(), got.cpu()))):
                return trace, r
    return None


def _without(shape, index):
    return shape[:index] + shape[index + 1:]


def _first_of_shape(trace, r, shape):
    """The index of the first record that made record `r`'s shape, back through the records
    that keep it (+ b, ~mask: what they read of that very shape)."""
    while len(trace[r]) >= 5:
        same_shape = [source for size, source in trace[r][4]
                      if source >= 0 and tuple(size) == tuple(shape)]
        if not same_shape:
            break
        r = same_shape[0]
    return r


# the functions that reduce an axis away (what else removes one is an index or a select)
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "logsumexp",
               "std", "var", "argmax", "argmin", "nansum", "nanmean", "median", "all", "any"}


def _shape_change(trace, read, got, want, dims, axes, function=""):
    """What a line did to the shape: from the tensors it read (`read`, [(shape, source)]) to
    `got` (with `function`, the torch function's name), against the answer's `want`: an axis
    reduced or indexed away, a merge, a split, a join, a repeat, a broadcast, size-1 axes
    removed or added (the first that fits), else the shape it came from; "" without one."""
    if not read:
        return ""
    source = tuple(read[0][0])
    names = axis_names(source, dims)
    want_names = axis_names(want, dims, axes)
    listed = ", ".join(names)
    shapes = [tuple(shape) for shape, _ in read]
    count = len(shapes)
    if count > 1 and len(set(shapes)) == 1 and len(got) == len(source):
        for a in range(len(source)):
            if got == source[:a] + (source[a] * count,) + source[a + 1:]:
                for k in range(len(want)):
                    if want == source[:k] + (count,) + source[k:]:
                        return MESSAGES["shape_joins"].format(
                            count=count, axes=listed, axis=_axis_label(names[a]), index=k)
                for b in range(len(source)):
                    if b != a and want == source[:b] + (source[b] * count,) + source[b + 1:]:
                        return MESSAGES["shape_joins_other"].format(
                            count=count, axes=listed, axis=_axis_label(names[a]),
                            want_axis=_axis_label(names[b]))
    if len(source) == len(got) + 1:
        for a in range(len(source)):
            if _without(source, a) != got:
                continue
            for b in range(len(source)):
                if source[b] != source[a] and _without(source, b) == want:
                    key = "shape_reduced" if function in _REDUCTIONS else "shape_removes"
                    return MESSAGES[key].format(
                        axis=_axis_label(names[a]), dim=a, axes=listed,
                        want_axis=_axis_label(names[b]), want_dim=b)
        for i in range(len(got)):
            if source[:i] + (source[i] * source[i + 1],) + source[i + 2:] == got and min(
                    source[i], source[i + 1]) > 1:
                text = MESSAGES["shape_merges"].format(first=names[i], second=names[i + 1],
                                                       axes=listed)
                if want == source:
                    return text + MESSAGES["shape_merges_apart"]
                for j in range(len(source) - 1):
                    if j != i and source[:j] + (source[j] * source[j + 1],) + source[j + 2:] \
                            == want:
                        return text + MESSAGES["shape_merges_other"].format(
                            first=names[j], second=names[j + 1])
                return text
    if len(source) == len(got):
        grown = [a for a in range(len(got)) if got[a] != source[a]]
        if len(grown) == 1 and got[grown[0]] % source[grown[0]] == 0 and \
                got[grown[0]] > source[grown[0]]:
            a = grown[0]
            times = got[a] // source[a]
            for b in range(len(source)):
                if b != a and source[b] > 0 and want == source[:b] + (
                        source[b] * times,) + source[b + 1:]:
                    return MESSAGES["shape_repeats_other"].format(
                        axis=_axis_label(names[a]), times=times, size=source[a], axes=listed,
                        want_axis=_axis_label(names[b]))
            if len(want) == len(got) and want[a] != got[a]:
                return MESSAGES["shape_repeats"].format(
                    axis=_axis_label(names[a]), got=got[a], times=times, size=source[a],
                    want=want[a], want_is=_quantity(want[a], dims))
    if len(got) == len(source) + 1:
        for i in range(len(source)):
            if (got[:i] + (got[i] * got[i + 1],) + got[i + 2:] == source
                    and min(got[i], got[i + 1]) > 1):
                got_names = axis_names(got, dims)
                text = MESSAGES["shape_splits"].format(axis=_axis_label(names[i]), axes=listed,
                                                       first=got_names[i],
                                                       second=got_names[i + 1])
                if sorted(got) == sorted(want):
                    text += MESSAGES["shape_splits_order"].format(
                        want_axes=", ".join(want_names))
                return text
    if len(got) == len(source) and sorted(got) == sorted(want) and sorted(source) == sorted(
            got) and source != got:
        return MESSAGES["shape_reorders"].format(axes=listed,
                                                 got_axes=", ".join(axis_names(got, dims)),
                                                 want_axes=", ".join(want_names))
    if len(read) == 2 and _squeezed(got) != _squeezed(want) and sorted(
            _squeezed(got)) == sorted(_squeezed(want)):
        first, second = (tuple(shape) for shape, _ in read)
        try:
            combined = tuple(torch.broadcast_shapes(first, second))
        except RuntimeError:
            combined = None
        if combined == got and first != got and second != got:
            return MESSAGES["shape_broadcast_order"].format(
                first=", ".join(axis_names(first, dims)),
                second=", ".join(axis_names(second, dims)),
                got_axes=", ".join(axis_names(got, dims)),
                want_axes=", ".join(axis_names(_squeezed(want), dims)))
    wider = [(shape, made) for shape, made in read[1:] if len(shape) == len(got) > len(want)]
    if len(source) < len(got) and wider:
        shape, made = wider[0]
        where = ""
        if made >= 0:
            place, code = _place(trace[_first_of_shape(trace, made, shape)])
            where = MESSAGES["shape_broadcast_made"].format(place=place, code=code)
        return MESSAGES["shape_broadcast"].format(
            axes=listed, rank=len(shape), other_axes=", ".join(axis_names(shape, dims)),
            made=where)
    ones = [a for a in range(len(source)) if source[a] == 1]
    squeezed = [s for s in source if s != 1]
    if ones and len(want) < len(got) < len(source) and [s for s in got if s != 1] == squeezed \
            and [s for s in want if s != 1] == squeezed:
        return MESSAGES["shape_singletons"].format(
            removed=len(source) - len(got), axes=listed, want_removed=len(source) - len(want))
    if len(got) == len(source) + 1 and [s for s in got if s != 1] == [
            s for s in source if s != 1] and len(want) == len(source):
        return MESSAGES["shape_singleton_added"].format(axes=listed)
    return MESSAGES["shape_made_from"].format(axes=listed)


def traced_shape(actual, want, traces, dims, axes=None):
    """The trace family for a wrong shape: the line of the student's code that computed the
    tensor of the wrong shape (`actual`, found in `traces` by its very values), and what that
    line did to the shape of what it read, against the answer's shape `want` (a reduction
    over another axis, axes merged that the answer keeps apart or merges otherwise, a cat
    where a stack makes a new axis, a repeat along another axis or by another count, size-1
    axes removed or added); None where no traced line computed it."""
    made = _maker(actual, traces) if isinstance(actual, torch.Tensor) else None
    if made is None:
        return None
    trace, r = made
    # back to the first line that made that shape (what comes after it, + b, ~, keeps it)
    r = _first_of_shape(trace, r, actual.shape)
    # and back over a line that only adds or removes size-1 axes, where what it read has
    # the same wrong sizes already
    while len(trace[r]) >= 5 and trace[r][4] and trace[r][4][0][1] >= 0:
        shape, source = trace[r][4][0]
        if (_squeezed(shape) != _squeezed(trace[r][2].shape)
                or _squeezed(shape) == _squeezed(want)):
            break
        r = _first_of_shape(trace, source, shape)
    record = trace[r]
    place, code = _place(record)
    read = record[4] if len(record) >= 5 else ()
    return MESSAGES["shape_made"].format(place=place, code=code) + _shape_change(
        trace, read, tuple(record[2].shape), tuple(want), dims, axes,
        record[3] if len(record) >= 5 else "")


def _squeezed(shape):
    return [size for size in shape if size != 1]
