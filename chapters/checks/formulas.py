"""The exercises' formulas as data, for the one-step family of diagnose.py: each is the list
of an exercise's steps (scale, mask, softmax, split, projection, norm, residual, ...) and the
other ways a step can be done, from which diagnose.Formula.mistakes() computes what the
formula gives with one step left out or moved. Data per exercise, not a hand-written bug: a
step's wrong constants come from the exercise's named sizes (diagnose.constant_names).

Grader-only. These functions compute the exercises' right answers, so this module must not
reach a student: only common.step_mistakes (a @reference, whose body the kit removes)
imports it, and the kit replays its results from the fixtures (autograde.kit,
course.checks_modules(kit=True), tests/test_course.py).

FORMULAS maps the name a check passes to step_mistakes() to a function of the check's named
sizes (and options) that returns a Formula. One section per chapter, in course order.
"""
import math

import torch

from . import diagnose
from .common import float32_sqrt_message
from .diagnose import _near, _total, constant_names
from .language import translated

# Every sentence these formulas give a student (diagnose.Formula puts a step's sentence after
# "the {name} step"), one template each, in the language of now (checks/language.py): the
# formulas are built in step_mistakes(), at the moment the check asks, so their sentences are
# in the notebook's language, and the kit's fixtures hold them in every language.
MESSAGES = translated(__name__) | {
    # the steps' names as diagnose.Formula's sentences show them (Formula.label): the keys
    # are the names the code uses (a step without one here is shown by its code name)
    "step_names": {
        "Q K^T product": "Q K^T product",
        "absolute value": "absolute value",
        "attention": "attention",
        "attention dropout": "attention dropout",
        "average": "average",
        "average over the batch": "average over the batch",
        "baseline subtraction": "baseline subtraction",
        "bias": "bias",
        "bias b_O": "bias b_O",
        "biases": "biases",
        "block of rows of head i": "block of rows of head i",
        "bytes per value": "bytes per value",
        "cache": "cache",
        "concatenation": "concatenation",
        "copy": "copy",
        "cross-entropy": "cross-entropy",
        "cut of d_model into (num_heads, head_dim)": "cut of d_model into (num_heads, head_dim)",
        "decoding": "decoding",
        "difference": "difference",
        "division by the sum": "division by the sum",
        "dot products": "dot products",
        "exponential": "exponential",
        "feed-forward": "feed-forward",
        "feed-forward dropout": "feed-forward dropout",
        "fill": "fill",
        "first residual": "first residual",
        "flatten": "flatten",
        "flatten of (num_heads, head_dim)": "flatten of (num_heads, head_dim)",
        "gates": "gates",
        "heads": "heads",
        "inputs": "inputs",
        "inputs and targets": "inputs and targets",
        "key": "key",
        "key and value (2)": "key and value (2)",
        "key/value heads": "key/value heads",
        "key/value width": "key/value width",
        "largest entry": "largest entry",
        "layers": "layers",
        "loss": "loss",
        "loss.backward() and optimizer.step()": "loss.backward() and optimizer.step()",
        "mask": "mask",
        "masked keys": "masked keys",
        "merge of the heads": "merge of the heads",
        "minus sign": "minus sign",
        "normalise": "normalise",
        "output": "output",
        "output projection": "output projection",
        "per head": "per head",
        "per-head products": "per-head products",
        "permutation of the output": "permutation of the output",
        "product x W_i^T": "product x W_i^T",
        "projection": "projection",
        "projection by W_O": "projection by W_O",
        "query positions": "query positions",
        "reduction axis": "reduction axis",
        "repeat": "repeat",
        "repeat of the key/value heads": "repeat of the key/value heads",
        "result": "result",
        "rotary": "rotary",
        "rotation": "rotation",
        "scale": "scale",
        "second residual": "second residual",
        "selection": "selection",
        "size": "size",
        "source": "source",
        "split into heads": "split into heads",
        "stack of the heads along the rows": "stack of the heads along the rows",
        "subtraction of the maximum": "subtraction of the maximum",
        "sum over the heads": "sum over the heads",
        "sum over the keys": "sum over the keys",
        "table": "table",
        "transpose of each W_i": "transpose of each W_i",
        "triangle": "triangle",
        "weighted sum": "weighted sum",
        "weights": "weights",
        "zeroing of the masked weights": "zeroing of the masked weights",
    },
    # what leaving out a step means, where its name alone does not say it (diagnose.Formula's
    # "the {name} step is left out: {meaning}"); the keys are the steps' code names
    "left_out_means": {
        "mask": "no mask is applied (the mask was not used, or not passed on to the function "
                "that applies it), so the masked keys are attended to as any other (with a "
                "causal mask: the later, future positions too)",
        "fill": "the masked scores are not filled before the softmax, so the softmax runs over "
                "every key and the masked weights are only zeroed after it: the weights left no "
                "longer sum to 1 (they are not renormalised)",
    },
    "roles": {
        "query": "query",
        "key": "key",
        "value": "value",
    },
    "layout_words": {
        "rows": "the rows [i*head_dim, (i+1)*head_dim)",
        "columns": "the columns [i*head_dim, (i+1)*head_dim)",
        "strided": "strided rows (head i as rows i, i + num_heads, ...)",
    },
    "layout_why": {
        "rows": " (nn.Linear stores its matrix as (out_features, in_features): head i's block "
                "is a block of rows)",
        "columns": " (nn.Linear stores W_O transposed, (d_model, num_heads * head_dim): head "
                   "i's block W_O^i is a block of columns)",
    },
    # sentences with fields, and the pieces they are made of
    "either": ", or ",
    "scale_half_d_k":
        "divides by d_k / 2 = {half:g} instead of sqrt(d_k) = sqrt({d_k}) (d_k ** 1/2 is (d_k ** "
        "1) / 2: write d_k ** 0.5)",
    "scale_twice_d_k":
        "divides by 2 * d_k = {twice} instead of sqrt(d_k) = sqrt({d_k}) (x / d_k ** 1/2 is (x / "
        "d_k) / 2: write d_k ** 0.5)",
    "scale_times_constant": "multiplies by {label} instead of dividing by sqrt(d_k) = sqrt({d_k})",
    "scale_by_constant": "divides by {label} instead of sqrt(d_k) = sqrt({d_k})",
    "scale_why_root":
        ": Q K^T has variance d_k, so its standard deviation is sqrt(d_k); dividing by d_k leaves "
        "variance 1/d_k and flattens the weights",
    "scale_which_d_k": ": d_k is the size of the last axis of query and key, query.shape[-1]",
    "scale_float32": "divides by sqrt({label}) rounded to float32 ({root!r}): {rule}",
    "softmax_batch_axis":
        "runs over dim={axis}, a batch axis, instead of the keys (F.softmax without dim= picks "
        "dim=0 for 3-D scores, 1 for 4-D)",
    "softmax_last_axis": "is the last axis instead of dim={dim} (in the max and the sum)",
    "mask_complement":
        "fills the scores where the mask is True (masked_fill(mask, ...)) instead of where it is "
        "False (masked_fill(~mask, ...)): it masks the complement of the mask, whose True means "
        "'may attend'",
    "mask_complement_nan":
        "the mask step {complement}; the softmax then gives NaN in the rows of the queries whose "
        "keys are all filled",
    "multihead_scale_constant": "divides by {label} instead of sqrt(head_dim)",
    "multihead_scale_float32": "divides by sqrt(head_dim) rounded to float32: {rule}",
    "multihead_projection_left_out":
        "leaves out the {role} projection ({name}_proj): the {role} input is used as it is",
    "loaded_stack_weight": "in_proj_weight stacks [W_Q; W_K; W_V]",
    "loaded_stack_bias": "in_proj_bias stacks [b_q; b_k; b_v]",
    "loaded_separate": "; where kdim or vdim differ, q_proj_weight, k_proj_weight, v_proj_weight",
    "loaded_other_order":
        "takes torch's {other}-{part} instead of its {name}-{part}: the q, k, v order is wrong "
        "({stack} in this order: {letters} = in_proj_{part}.chunk(3){separate})",
    "loaded_in_place_of_out":
        "takes torch's {other}-{part} (in_proj_{part}.chunk(3)[{index}]) instead of "
        "out_proj.{part}: W_O and b_O live in torch_mha.out_proj",
    "loaded_hint_out": " (W_O lives in torch_mha.out_proj, weight and bias)",
    "loaded_hint_bias": " (in_proj_bias stacks [b_q; b_k; b_v]: chunk(3) it like in_proj_weight)",
    "loaded_left_out": "is left out: ours keeps its old values{hint}",
    "head_projection_neighbour":
        "takes head {j}'s block (off by one: head i = {i} is asked, counted from 0)",
    "head_projection_other_head":
        "takes head {j}'s block of rows, [{j}*head_dim, {j_end}*head_dim), instead of head i = "
        "{i}'s, [{i}*head_dim, {i_end}*head_dim)",
    "head_projection_one_entry":
        "adds the one number bias[i] = bias[{i}] to every feature: head i's bias is the block "
        "bias[i*head_dim:(i+1)*head_dim], the same rows as the weight",
    "causal_shift":
        " (tril(diagonal={diagonal}): the diagonal moved by k_len - q_len = {diagonal}, where "
        "diagonal=0 is right)",
    "causal_bottom_right":
        "aligns the triangle at the bottom-right corner (query i sees keys 0..i + k_len - q_len, "
        "as for the last q_len queries of a cache) instead of the top-left (query i sees keys "
        "0..i){shift}",
    "relation_key_previous": "key i-1",
    "relation_key_first": "key 0",
    "relation_swapped":
        "reads {other_key} instead of {right_key}: that is `{other_name}` (are prev and first "
        "swapped? return RelationScores(prev, first))",
    "relation_diagonal":
        "reads key i (the main diagonal, each query on itself) instead of {right_key}",
    "relation_above":
        "reads an entry above the diagonal (key i+1 of query i, or weights[..., i-1, i] with "
        "query and key exchanged) instead of {right_key}: the causal mask sets those to 0",
    "layout_other": "takes {other} as head i's block instead of {right}{why}",
    "the_parameter": "the parameter",
    "copy_left_out":
        "is left out: {key} was not changed (head 0's block goes into every head i = 1 .. "
        "num_heads - 1, or the heads still compute different things; one way to get this is "
        "writing into a copy, such as .clone(), torch.cat or rows indexed with a list, which "
        "never reaches the parameter, instead of into a view of it)",
    "copy_stops_early":
        "stops before the last head (range(1, num_heads - 1) misses head num_heads - 1 = {last})",
    "copy_from_head": "copies head {j}'s block into every head instead of head 0's",
    "copy_into_first":
        "copies the other way, head {j}'s block into head 0 (the others unchanged), instead of "
        "head 0's block into every other head",
    "copy_only_first":
        "copies head 0's block into head 1 only (heads 2 .. {last} keep their own): every head i "
        "= 1 .. num_heads - 1 gets it",
    "out_bias_scaled":
        "scales it by the kept heads' share num_kept / num_heads = {kept}/{heads} instead of "
        "copying it as it is (out_proj.bias is added once after the sum over heads and belongs to "
        "no head)",
    "ignores_base": "ignores base={base:g} and uses the default {default:g}",
    "gqa_leaves_out_layer": "leaves out {name} (its weight and its bias)",
    "block_dropout_twice":
        "is applied twice (drop(drop(...)): one nn.Dropout call per sublayer output)",
    # the steps done another way (each Formula's variants and together sentences)
    "product_computes_k_q_t": "computes K Q^T (keys and queries exchanged)",
    "product_multiplies_queries_themselves_q":
        "multiplies the queries by themselves (Q Q^T: the keys left out)",
    "product_multiplies_keys_themselves_k":
        "multiplies the keys by themselves (K K^T: the queries left out)",
    "normalisation_without_exp":
        "divides the scores by their sum without the exponential (a softmax is exp(s) / sum "
        "exp(s): the exp step is missing)",
    "normalisation_sigmoid":
        "is a sigmoid of each score on its own, not a softmax over the keys (sigmoid weights do "
        "not sum to 1 along a row)",
    "attention_uses_complement_mask_true": "uses the complement of the mask (True/False mixed up)",
    "attention_runs_over_queries_dim":
        "runs over the queries (dim=-2) instead of the keys: each query's weights over the keys "
        "must sum to 1, so use dim=-1",
    "attention_softmax_left_out":
        "is left out: the scores, not their softmax, are used as the weights (the softmax is "
        "missing)",
    "attention_comes_before_scale_weights":
        "comes before the scale: the weights, not the scores, are divided by sqrt(d_k)",
    "attention_scale_left_out":
        "is left out: the scores are not scaled, divide Q K^T by sqrt(d_k)",
    "attention_weights_transposed_one_row":
        "is the weights transposed, one row per key (.transpose(-2, -1), or K Q^T): each row "
        "belongs to one query and sums to 1",
    "attention_multiplies_weights_keys_values":
        "multiplies the weights by the keys instead of the values",
    "attention_multiplies_transposed_weights_one":
        "multiplies the transposed weights (one row per key) by the values",
    "attention_divides_output_sqrt_d":
        "divides the output by sqrt(d_k) as well (only the scores Q K^T are scaled)",
    "scores_output_is_softmax":
        "is the softmax of the scores (the weights), not the scores that go into it",
    "softmax_takes_maximum_along_last":
        "takes the maximum along the last axis instead of along dim",
    "softmax_sums_whole_tensor_along":
        "sums the whole tensor instead of along dim (the sum of all its entries, one number, "
        "where each slice along dim needs its own sum so that it sums to 1): .sum(dim=dim, "
        "keepdim=True)",
    "softmax_sums_along_last_axis": "sums along the last axis instead of along dim",
    "softmax_divides_sum_exp_scores":
        "divides by the sum of exp(scores) without the maximum subtracted (the numerator and the "
        "denominator must subtract the same maximum)",
    "softmax_result_log": "is the log of the softmax (log_softmax), not the softmax",
    "softmax_left_out_exp_scores":
        "is left out: exp(scores - max) is returned without dividing by its sum along dim",
    "entropy_takes_mean_sum": "takes the mean instead of the sum",
    "entropy_takes_largest_term_sum": "takes the largest term instead of the sum",
    "entropy_sums_over_queries_dim":
        "sums over the queries (dim=-2) instead of the keys (the last axis)",
    "entropy_sums_over_first_axis":
        "sums over the first axis (dim=0) instead of the keys (the last axis)",
    "entropy_uses_log_base_2":
        "uses log base 2 (bits) instead of the natural log (nats, torch.log)",
    "entropy_uses_log_base_10": "uses log base 10 instead of the natural log (nats, torch.log)",
    "entropy_taken_softmax_weights_weights":
        "is taken of softmax(weights) instead of the weights themselves (each row already sums to "
        "1: use the weights as they are)",
    "entropy_log_w_alone_without":
        "is log w alone, without the factor w (each term of the entropy is w log w, which is 0 "
        "where w is 0; log 0 alone is -inf)",
    "entropy_left_out_entropy_negative":
        "is left out: the entropy is negative, it is MINUS the sum of w log w",
    "entropy_divided_log_lk_largest":
        "is divided by log(Lk), the largest entropy (a normalised entropy): the exercise asks for "
        "the entropy itself, in nats",
    "entropy_perplexity": "is exp(entropy), the perplexity, not the entropy",
    "multihead_multiplies_sqrt_head_dim": "multiplies by sqrt(head_dim) instead of dividing by it",
    "multihead_projects_keys_q_proj": "projects the keys with q_proj",
    "multihead_projects_values_k_proj": "projects the values with k_proj",
    "multihead_projects_queries_k_proj": "projects queries with k_proj and keys with q_proj",
    "multihead_projects_key_input_values": "projects the key input as the values",
    "multihead_projects_key_input_queries":
        "projects the key input as the queries (q_proj must read the query input)",
    "multihead_projects_query_input_keys":
        "projects the query input as the keys and the values, as in self-attention (k_proj must "
        "read the key input, v_proj the value input)",
    "multihead_leaves_out_input_projections": "leaves out the input projections' biases",
    "multihead_exchanges_keys_values": "exchanges keys and values",
    "multihead_reshapes_without_transpose": "reshapes without the transpose",
    "multihead_interleaves_heads_features": "interleaves the heads' features",
    "multihead_cuts_d_model_into":
        "cuts d_model into head_dim heads of num_heads features (num_heads and head_dim "
        "exchanged: split_heads(t, num_heads) takes the number of heads)",
    "multihead_adds_causal_mask_query":
        "adds a causal mask (each query sees only the keys up to its own position) that the "
        "exercise does not ask for: with no mask every query attends to every key",
    "multihead_tiles_key_value_heads":
        "tiles the key/value heads (repeat) instead of giving each its group of consecutive query "
        "heads (repeat_interleave)",
    "multihead_runs_over_queries_dim": "runs over the queries (dim=-2) instead of the keys",
    "multihead_runs_over_heads_dim": "runs over the heads (dim=1) instead of the keys",
    "multihead_runs_over_batch_dim": "runs over the batch (dim=0) instead of the keys",
    "multihead_comes_before_scale_weights":
        "comes before the scale: the weights, not the scores, are divided by sqrt(head_dim)",
    "multihead_divides_sqrt_head_dim":
        "divides it by sqrt(head_dim) as well (only the scores Q K^T are scaled)",
    "multihead_leaves_out_output_bias": "leaves out the output bias",
    "multihead_multiplies_w_o_untransposed":
        "multiplies by W_O untransposed (o @ out_proj.weight)",
    "multihead_adds_query_residual_output": "adds the query (a residual) to the output",
    "multihead_uses_only_diagonal_blocks":
        "uses only the diagonal blocks of W_O (each head projected only into its own slice of the "
        "output)",
    "multihead_adds_b_o_once": "adds b_O once per head (num_heads times)",
    "multihead_output_projection_w_o":
        "the output projection W_O is applied to the projected values, before the attention, "
        "instead of to the merged heads",
    "multihead_returns_transposed_b_num":
        "returns them transposed, (B, num_heads, Lk, Lq): one row per key instead of one per "
        "query",
    "projection_by_heads_reshapes_without_transpose_heads":
        "reshapes without the transpose (heads and positions mixed)",
    "projection_by_heads_cuts_w_o_into":
        "cuts W_O into interleaved rows (W_O.view(head_dim, num_heads, d_model): head i gets rows "
        "i, i + num_heads, ...; W_O^i is the block of rows [i*head_dim, (i+1)*head_dim))",
    "projection_by_heads_gives_every_head_first":
        "gives every head the first block W_O[:head_dim]",
    "projection_by_heads_uses_w_o_transposed":
        "uses W_O transposed (W_O is already in the x @ W convention, (num_heads * head_dim, "
        "d_model): its row block i is W_O^i, no .T)",
    "projection_by_heads_indexes_positions_heads_heads":
        "indexes the positions instead of the heads: heads[:, :, i] is position i of every head, "
        "head i is heads[:, i]",
    "projection_by_heads_averages_heads_summing": "averages the heads instead of summing them",
    "projection_by_heads_leaves_out_last_head":
        "leaves out the last head (a loop over range(num_heads - 1) instead of range(num_heads))",
    "projection_by_heads_leaves_out_first_head":
        "leaves out the first head, head 0 (heads are numbered from 0: range(num_heads))",
    "projection_by_heads_sums_over_positions_l": "sums over the positions L instead of the heads",
    "projection_by_heads_adds_b_o_once":
        "adds b_O once per head (num_heads times) instead of once after the sum",
    "projection_by_heads_adds_b_o_twice": "adds b_O twice (once too often)",
    "loaded_weight_copies_transpose_torch_s":
        "copies the transpose of torch's matrix (nn.Linear.weight, in_proj_weight and "
        "out_proj.weight all store (out_features, in_features): copy without transposing)",
    "parameter_count_counts_whole_input_size":
        "counts a whole (input size x d_model) matrix per head (num_heads times): the heads slice "
        "W_Q, W_K, W_V, they do not copy them",
    "parameter_count_counts_only_one_head":
        "counts only one head's columns (input size x head_dim): the heads together hold input "
        "size x d_model each",
    "parameter_count_ignores_query_size_key":
        "ignores query_size, key_size and value_size (counts d_model inputs for each): W_Q has "
        "query_size * d_model weights, W_K key_size * d_model, W_V value_size * d_model",
    "parameter_count_counts_w_o_once":
        "counts W_O once per head (num_heads matrices): there is one W_O, shared by all heads",
    "parameter_count_counts_only_one_head_2":
        "counts only one head's block of W_O (head_dim x d_model): the heads' blocks together "
        "make one d_model x d_model matrix",
    "parameter_count_counts_w_o_value":
        "counts W_O as value_size x d_model: W_O maps the d_model features of the merged heads, "
        "whatever value_size is",
    "parameter_count_left_out_out_proj":
        "is left out: out_proj (W_O) has d_model * d_model weights of its own",
    "parameter_count_leaves_out_output_projection":
        "leaves out the output projection's bias (counts 3 * d_model): out_proj has d_model "
        "biases too",
    "parameter_count_ignores_bias_false_counts":
        "ignores bias=False (counts the 4 * d_model biases whatever `bias` is): with bias=False "
        "the layers have no biases",
    "parameter_count_counts_only_one_head_3":
        "counts only one head's biases (4 * head_dim): each of the four layers has d_model "
        "biases, which the heads slice",
    "parameter_count_left_out_four_nn":
        "is left out: each of the four nn.Linear layers has d_model biases (4 * d_model in all "
        "when bias=True)",
    "split_cuts_head_dim_num":
        "cuts it as (head_dim, num_heads): head i gets the strided features i, i + num_heads, ...",
    "split_numbers_heads_reverse_order":
        "numbers the heads in reverse order (head i must hold features [i*head_dim, "
        "(i+1)*head_dim), head 0 the first block)",
    "split_x_reshaped_straight_b":
        "x is reshaped straight to (B, num_heads, L, head_dim) with no transpose(1, 2): the "
        "reshape cuts the numbers in memory order, so heads and positions are mixed (a head gets "
        "pieces of several positions)",
    "split_x_transposed_b_d":
        "x is transposed to (B, d_model, L) before the cut: the reshape then cuts across "
        "positions; cut d_model first, (B, L, num_heads, head_dim), then transpose(1, 2)",
    "merge_left_out_reshape_b":
        "is left out: a reshape of (B, num_heads, L, head_dim) straight to (B, L, d_model) mixes "
        "heads and positions",
    "merge_swaps_last_two_axes":
        "swaps the last two axes (transpose(2, 3)) instead of num_heads and L: heads and "
        "positions are mixed",
    "merge_puts_head_dim_before":
        "puts head_dim before num_heads (permute(0, 2, 3, 1)): the heads' features are "
        "interleaved (head i goes to features i, i + num_heads, ...) instead of filling the block "
        "[i*head_dim, (i+1)*head_dim)",
    "merge_puts_heads_side_side":
        "puts the heads side by side in reverse order (head i must fill features [i*head_dim, "
        "(i+1)*head_dim), head 0 the first block)",
    "merge_sums_heads_over_num":
        "sums the heads (over num_heads) instead of putting them side by side: each head's "
        "head_dim features must keep their own block of d_model",
    "merge_averages_heads_over_num":
        "averages the heads (over num_heads) instead of putting them side by side: each head's "
        "head_dim features must keep their own block of d_model",
    "merge_concatenates_heads_along_positions":
        "concatenates the heads along the positions (dim=1), (B, num_heads * L, head_dim), "
        "instead of along the features (dim=-1)",
    "fuse_left_out_plain_reshape":
        "is left out: a plain reshape of (num_heads, in_features, head_dim) scrambles the numbers "
        "(nn.Linear stores W_i^T, (head_dim, in_features), in rows [i*head_dim, (i+1)*head_dim))",
    "fuse_uses_w_t_transpose":
        "uses w.T (or transpose(0, 2)), which on a 3-D tensor moves the heads' axis too: "
        "transpose only the last two axes, w.transpose(1, 2)",
    "fuse_puts_head_dim_first":
        "puts head_dim first (permute(2, 0, 1)): the heads' rows are interleaved, row j*num_heads "
        "+ i holds head i's feature j",
    "fuse_puts_heads_reverse_order":
        "puts the heads in reverse order (head i's rows must be [i*head_dim, (i+1)*head_dim))",
    "head_projection_adds_head_0_s":
        "adds head 0's part of the bias, bias[:head_dim], to head i: head i's bias is "
        "bias[i*head_dim:(i+1)*head_dim], the same rows as the weight",
    "head_projection_adds_strided_entries_bias":
        "adds the strided entries bias[i::num_heads]: head i's bias is the block "
        "bias[i*head_dim:(i+1)*head_dim], the same rows as the weight",
    "head_projection_takes_strided_rows_i":
        "takes the strided rows i, i + num_heads, ... instead of a block",
    "head_projection_computes_head_dim_from":
        "computes head_dim from x's features (in_features // num_heads) instead of the weight's "
        "rows (d_model // num_heads)",
    "head_projection_takes_columns_weight_rows":
        "takes columns of the weight instead of rows (nn.Linear stores W transposed)",
    "head_projection_takes_rows_i_i":
        "takes rows i .. i + head_dim - 1 (the block starts at row i, not at i * head_dim)",
    "head_projection_subtracts_bias_adding_x":
        "subtracts the bias instead of adding it (x W_i^T + b_i)",
    "head_projection_starts_head_i_s":
        "starts head i's block at row i * num_heads instead of i * head_dim (head i holds rows "
        "[i*head_dim, (i+1)*head_dim))",
    "core_leaves_heads_after_positions":
        "leaves the heads after the positions, (B, L, num_heads, head_dim), with no transpose: "
        "the attention runs across the heads of each position instead of across positions",
    "core_reads_query_input_for": "reads the query input for the keys",
    "core_reads_key_input_for": "reads the key input for the queries",
    "core_reads_query_input_for_2":
        "reads the query input for the keys and the values, as in self-attention",
    "core_reads_query_input_for_3": "reads the query input for the values",
    "core_reads_key_input_for_2": "reads the key input for the values",
    "core_swaps_key_value_inputs":
        "swaps the key and value inputs (the keys read from value, the values from key)",
    "core_scale_moved_after_softmax":
        "the scale is moved after the softmax: the weights are divided by sqrt(head_dim) instead "
        "of the scores Q K^T before the softmax",
    "core_returns_transposed_b_num":
        "returns them transposed, (B, num_heads, Lk, Lq): each row must hold one query's weights "
        "over the keys, (B, num_heads, Lq, Lk)",
    "masked_softmax_takes_keys_where_mask":
        "takes the keys where the mask is True (the complement: True means may attend)",
    "masked_softmax_fills_masked_scores_fixed":
        "fills the masked scores with a fixed number such as -1e4, which is not below every real "
        "score, instead of torch.finfo(scores.dtype).min",
    "masked_softmax_fills_masked_scores_0":
        "fills the masked scores with 0 (or multiplies the scores by the mask) instead of "
        "torch.finfo(scores.dtype).min",
    "masked_softmax_adds_mask_scores_true":
        "adds the mask to the scores (True = +1, False = +0) as if it were a float additive mask",
    "masked_softmax_fills_scores_keys_may":
        "fills the scores of the keys that may be attended (where the mask is True) instead of "
        "the masked ones",
    "masked_softmax_zeroes_weights_keys_may":
        "zeroes the weights of the keys that may be attended (where the mask is True) instead of "
        "the masked ones",
    "masked_softmax_log_softmax_log_weights":
        "is a log_softmax (log-weights, all <= 0) instead of a softmax",
    "masked_attention_scale_applied_after_softmax":
        "the scale is applied after the softmax (to the weights, or to the output) instead of to "
        "the scores before it",
    "masked_attention_multiplies_scores_mask_masked":
        "multiplies the scores by the mask (a masked score becomes 0, not very negative)",
    "masked_attention_fills_masked_scores_finite":
        "fills the masked scores with a finite number (finfo.min, -1e9) and never zeroes the "
        "masked weights, so a query with no key to attend to gets uniform weights",
    "masked_attention_multiplies_weights_mask_afterwards":
        "multiplies its weights by the mask afterwards (0 at the masked keys, but the rows then "
        "no longer sum to 1)",
    "causal_mask_ignores_k_len_parameter":
        "ignores k_len (the parameter is not used): the mask is (q_len, q_len) whatever k_len is "
        "(k_len is a parameter of its own; only its default, None, means q_len)",
    "causal_mask_exchanges_q_len_k": "exchanges q_len and k_len: (k_len, q_len), one row per key",
    "relation_reads_row_0_weights":
        "reads row 0, weights[..., 0, i] (query 0 on key i), instead of column 0, weights[..., i, "
        "0] (query i on key 0)",
    "relation_reads_key_1_key":
        "reads key 1 instead of key 0 (off by one: positions count from 0)",
    "relation_reads_key_i_2": "reads key i-2 instead of key i-1 (off by one)",
    "relation_starts_i_1_i":
        "starts at i = 1 instead of i = 2: at i = 1 the previous token is the first token, a row "
        "that cannot tell the two relations apart",
    "relation_takes_every_query_position":
        "takes every query position from i = 0 instead of i >= 2: rows 0 and 1 cannot tell the "
        "two relations apart",
    "relation_starts_i_3_i":
        "starts at i = 3 instead of i = 2 (off by one: the query positions are 2 .. L - 1)",
    "relation_stops_before_last_query":
        "stops before the last query position (i < L - 1 instead of i <= L - 1: a range one "
        "short)",
    "relation_sums_over_query_positions":
        "sums over the query positions instead of averaging (each score is a mean attention "
        "weight, between 0 and 1)",
    "relation_sums_over_batch_averaging": "sums over the batch instead of averaging",
    "relation_takes_largest_weight_over":
        "takes the largest weight over the query positions instead of their mean",
    "relation_averages_over_query_positions":
        "averages over the query positions only, for the first example of the batch (the batch is "
        "averaged too)",
    "similarity_compares_maps_one_query":
        "compares the maps one query row at a time (a cosine per row, averaged over the rows) "
        "instead of each map as one vector of Lq * Lk numbers",
    "similarity_averages_maps_over_batch":
        "averages the maps over the batch before comparing them (compare each example's maps, "
        "then average the matrices)",
    "similarity_flattens_batch_into_head":
        "flattens the batch into each head's vector (one cosine over all examples at once) "
        "instead of one cosine per example",
    "similarity_merges_batch_axis_into":
        "merges the batch axis into the heads axis (B * num_heads maps, compared with each other "
        "across examples) instead of comparing the heads within each example",
    "similarity_left_out_dot_products":
        "is left out: the dot products are not normalised (the cosine divides each flattened map "
        "by its norm, so that every head has similarity 1 with itself)",
    "similarity_runs_along_heads_axis":
        "runs along the heads axis (dim=1) instead of along each flattened map (dim=-1)",
    "similarity_normalises_query_s_row":
        "normalises each query's row of the map (over the keys, Lk) before flattening, instead of "
        "the whole flattened map of Lq * Lk numbers",
    "similarity_runs_along_batch_axis":
        "runs along the batch axis (dim=0) instead of along each flattened map (dim=-1)",
    "similarity_divides_map_sum_entries":
        "divides each map by the sum of its entries (the L1 norm, F.normalize(p=1)) instead of by "
        "its length (the L2 norm, p=2)",
    "similarity_subtracts_map_s_mean":
        "subtracts each map's mean first (a Pearson correlation): the cosine takes the maps as "
        "they are",
    "similarity_divides_sqrt_lq_lk":
        "divides by sqrt(Lq * Lk) (the dot products by the number of entries) instead of by each "
        "map's norm",
    "similarity_divides_one_norm_whole":
        "divides by one norm of the whole weights tensor (.norm() with no dim) instead of by each "
        "map's own norm (along dim=-1)",
    "similarity_batch_summed": "sums instead of averaging",
    "similarity_takes_first_example_averaging":
        "takes the first example instead of averaging over the batch",
    "similarity_takes_last_example_averaging":
        "takes the last example instead of averaging over the batch",
    "similarity_averages_over_all_axes":
        "averages over all axes (.mean() with no dim: one number) instead of over the batch axis "
        "only (.mean(0))",
    "ablation_switches_off_every_head":
        "switches off every head except head k (gates = 0, gates[k] = 1) instead of head k alone "
        "(gates = 1, gates[k] = 0)",
    "ablation_switches_off_heads_0":
        "switches off heads 0 .. k together at step k (one gates tensor, not reset to ones for "
        "each head) instead of head k alone",
    "ablation_switches_off_head_k":
        "switches off head k - 1 instead of head k (gates[k - 1] = 0: an index off by one, so "
        "entry 0 measures the last head)",
    "ablation_switches_off_every_head_2":
        "switches off every head of example k (gates of shape (N, num_heads) with gates[k] = 0, a "
        "row) instead of head k in every example (gates[:, k] = 0, a column)",
    "ablation_uses_only_loss_prev": "uses only loss_prev instead of loss_prev + loss_first",
    "ablation_uses_only_loss_first": "uses only loss_first instead of loss_prev + loss_first",
    "ablation_sums_cross_entropy_over":
        "sums the cross-entropy over the positions (reduction='sum') instead of its mean",
    "ablation_averages_two_losses_loss":
        "averages the two losses, (loss_prev + loss_first) / 2, instead of adding them",
    "ablation_applies_f_nll_loss":
        "applies F.nll_loss to the logits (nll_loss wants log-probabilities: log_softmax first) "
        "instead of F.cross_entropy, which takes logits",
    "ablation_wrong_way_round_loss":
        "is the wrong way round: the loss with every head on minus the loss with head k off",
    "ablation_divides_loss_no_mask":
        "divides by the loss with no mask (a relative increase) instead of only subtracting it",
    "ablation_takes_absolute_value_difference":
        "takes the absolute value of the difference (a head whose removal lowers the loss has a "
        "negative importance)",
    "ablation_subtracts_loss_every_head":
        "subtracts the loss with every head off (gates all 0) instead of the loss with no mask "
        "(every head on)",
    "ablation_replaced_gradient_score_dl":
        "is replaced by the gradient score |dL/d gate_k| (Michel et al.), not the ablation: set "
        "head k's gate to 0 and measure how much the loss grows",
    "head_copy_copies_average_all_heads":
        "copies the average of all heads' blocks into every head instead of head 0's block",
    "head_pruning_keeps_first_heads_0":
        "keeps the first heads 0 .. num_kept - 1 instead of those not in heads_to_remove",
    "head_pruning_keeps_heads_heads_remove":
        "keeps the heads in heads_to_remove instead of the others",
    "out_bias_copies_head_0_s":
        "copies head 0's entries into every head's block, as for the input projections' biases, "
        "instead of leaving it as it is",
    "repeat_kv_repeats_key_value_head":
        "repeats each key/value head num_heads times instead of num_heads // num_kv_heads",
    "repeat_kv_repeats_along_l_axis":
        "repeats along the L axis (dim=2) instead of the key/value heads axis (dim=1)",
    "repeat_kv_ratio_inverted":
        "repeats each key/value head num_kv_heads // num_heads times (the division the other "
        "way round) instead of G = num_heads // num_kv_heads",
    "rotary_pairs_neighbouring_features_2i":
        "pairs neighbouring features (2i, 2i + 1) instead of i and i + head_dim // 2",
    "rotary_reads_pairs_halves_but":
        "reads the pairs as halves but writes them back interleaved (2i, 2i + 1)",
    "rotary_reads_neighbouring_features_2i":
        "reads neighbouring features (2i, 2i + 1) but writes the pairs back as halves",
    "rotary_turns_pair_angle_other": "turns each pair by -angle (the other way)",
    "rotary_uses_frequencies_base_i":
        "uses the frequencies base ** (-i / head_dim) (without the 2)",
    "rotary_ignores_positions_given_uses": "ignores the positions given and uses 0 .. L - 1",
    "rotary_turns_position_p_angle":
        "turns position p by the angle of position p + 1 (the positions counted from 1)",
    "rotary_exchanges_cos_sin_cos":
        "exchanges cos and sin (cos where sin belongs in the turned pair, and sin where cos does)",
    "rotary_uses_frequencies_base_4":
        "uses the frequencies base ** (-4 i / head_dim) (the feature index 2i where the pair "
        "index i belongs)",
    "rotary_uses_frequencies_base_2":
        "uses the frequencies base ** (+2 i / head_dim) (the exponent's minus sign left out)",
    "rotary_counts_pairs_i_from":
        "counts the pairs i from 1 instead of 0 (frequencies base ** (-2 (i + 1) / head_dim): "
        "pair 0 must turn by the position itself, frequency 1)",
    "rotary_computes_base_2_i":
        "computes base ** -2 * i / head_dim: ** binds before * and /, so the exponent needs its "
        "parentheses, base ** (-2 * i / head_dim)",
    "rotary_reads_x2_sin_second":
        "reads x2 * sin in the second entry of each turned pair where x1 * sin belongs (x1 sin + "
        "x2 cos: the second entry mixes both halves)",
    "rotary_reads_x1_sin_first":
        "reads x1 * sin in the first entry of each turned pair where x2 * sin belongs (x1 cos - "
        "x2 sin: the first entry mixes both halves)",
    "cached_attention_attends_over_call_s":
        "attends over this call's keys and values only, not the cached ones",
    "cached_attention_attends_over_keys_values":
        "attends over the keys and values cached before this call only, without this call's own "
        "(the cache read before the append: attend over what append returns)",
    "cached_attention_aligns_causal_mask_top":
        "aligns the causal mask at the top-left corner (tril(0)) instead of the bottom-right "
        "(tril(T - L_new)): the new queries are the last L_new of T positions",
    "cached_attention_flips_sign_causal_mask":
        "flips the sign of the causal mask's diagonal offset (tril(L_new - T) instead of tril(T - "
        "L_new))",
    "cached_attention_restarts_positions_0_every":
        "restarts the positions at 0 in every call (the new positions are len(cache) .. "
        "len(cache) + L_new - 1)",
    "cached_attention_rotates_values_too_rotary":
        "rotates the values too (rotary turns queries and keys only)",
    "cached_attention_rotates_keys_only_queries": "rotates the keys only, not the queries",
    "cached_attention_reads_len_cache_after":
        "reads len(cache) after the append: the new positions start at len(cache) + L_new instead "
        "of len(cache)",
    "cached_attention_rotates_cached_keys_again":
        "rotates the cached keys again, every key by its position, although each was rotated once "
        "before it was cached",
    "equivariance_uses_inverse_permutation_argsort":
        "uses the inverse permutation (argsort(perm))",
    "equivariance_compares_with_permuted_input":
        "compares with the permuted input x[:, perm] instead of the permuted output "
        "layer(x)[:, perm] (the layer's output for the unpermuted tokens)",
    "equivariance_first_example_only":
        "takes the largest entry of the first example of the batch only (index 0 of the "
        "batch axis) instead of the largest over every example of the whole batch",
    "sinusoidal_exponent_not_divided":
        "uses the frequencies base ** (-2 i): the exponent 2i is not divided by d_model "
        "(w_i = base ** (-2 i / d_model))",
    "cached_attention_rotates_keys_after_append":
        "rotates the keys after the append instead of before it: the cache holds them "
        "unrotated, and every key of the whole cache is turned by the new positions, each "
        "cached key rotated again at the new token's position instead of its own; rotate the "
        "new keys before they go into the cache",
    "equivariance_subtracts_other_way_round":
        "subtracts the other way round (layer(x)[:, perm] - layer(x[:, perm]))",
    "equivariance_takes_mean_largest_entry": "takes the mean instead of the largest entry",
    "equivariance_takes_sum_largest_entry": "takes the sum instead of the largest entry",
    "equivariance_takes_smallest_entry_largest": "takes the smallest entry instead of the largest",
    "equivariance_divides_largest_entry_largest":
        "divides the largest entry by the largest |layer(x)| (a relative gap, not the largest "
        "absolute difference)",
    "equivariance_takes_norm_differences_root":
        "takes the norm of the differences (the root of the sum of their squares, .norm()) "
        "instead of the largest entry",
    "equivariance_squares_differences_taking_absolute":
        "squares the differences instead of taking their absolute value",
    "kv_cache_bytes_assumes_2_bytes_per": "assumes 2 bytes per value (ignores bytes_per_value)",
    "kv_cache_bytes_counts_bits_8_per": "counts bits (8 per byte) instead of bytes",
    "gqa_parameters_d_model_many_key": "is d_model (as many key/value heads as query heads)",
    "gqa_parameters_num_kv_heads_without": "is num_kv_heads (without head_dim)",
    "gqa_parameters_counts_d_model_biases": "counts d_model biases for k_proj and v_proj",
    "gqa_parameters_counts_biases_even_when": "counts the biases even when bias=False",
    "gqa_parameters_bias_switch_inverted":
        "counts the biases when bias=False and none when bias=True (the switch read the other "
        "way round, as `if not bias`)",
    "sinusoidal_puts_cos_p_w":
        "puts cos(p w_i) at the even features 2i and sin(p w_i) at the odd ones",
    "sinusoidal_uses_frequencies_base_i":
        "uses the frequencies base ** (-i / d_model) (without the 2)",
    "sinusoidal_puts_sines_first_half":
        "puts the sines in the first half of the features and the cosines in the second "
        "(torch.cat of the two) instead of interleaving them at 2i and 2i + 1 (torch.stack on a "
        "last axis, then a reshape)",
    "sinusoidal_counts_positions_from_1":
        "counts the positions from 1 instead of 0 (row p is position p)",
    "sinusoidal_uses_frequencies_base_4":
        "uses the frequencies base ** (-4 i / d_model) (the feature index 2i where the pair index "
        "i belongs)",
    "sinusoidal_uses_frequencies_base_2":
        "uses the frequencies base ** (+2 i / d_model) (the exponent's minus sign left out)",
    "sinusoidal_counts_pairs_i_from":
        "counts the pairs i from 1 instead of 0 (frequencies base ** (-2 (i + 1) / d_model): pair "
        "0, features 0 and 1, must have frequency 1, sin(p) and cos(p))",
    "sinusoidal_computes_base_2_i":
        "computes base ** -2 * i / d_model: ** binds before * and /, so the exponent needs its "
        "parentheses, base ** (-2 * i / d_model)",
    "sinusoidal_exponent_over_num_positions":
        "divides the frequencies' exponent by num_positions instead of d_model (w_i = base ** "
        "(-2 i / d_model): d_model, the width of a row, not the number of rows)",
    "exponent_floor_division":
        "computes the exponent -2 i / {width} with // (floor division, which rounds down to a "
        "whole number) where / belongs",
    "sinusoidal_stacked_first_axis":
        "stacks the sines and cosines on a new first axis (dim=0) before the reshape, which then "
        "lays the entries out in another order: stack them on a new last axis (dim=-1), "
        "(num_positions, d_model // 2, 2), so that the reshape puts sin at 2i and cos at 2i + 1",
    "block_uses_norm2": "uses norm2 instead of norm1 (each sublayer has its own norm)",
    "block_uses_layernorm_which_subtracts":
        "uses a LayerNorm (which subtracts the mean first) instead of the RMSNorm",
    "block_has_no_rotary_positions":
        "has no rotary positions (rotary_cached_attention(self.attn, h, cache) turns each query "
        "and key by its position; cached_attention does not)",
    "block_calls_self_attn_h":
        "calls self.attn(h) (GroupedQueryAttention.forward: no causal mask, no rotary positions); "
        "attend through rotary_cached_attention(self.attn, h, cache), with a fresh KVCache() when "
        "no cache is given",
    "block_attends_without_causal_mask":
        "attends without the causal mask (rotary positions kept): every position reads the later "
        "ones too; rotary_cached_attention(self.attn, h, cache) applies the mask",
    "block_adds_normalised_input_x": "adds the normalised input instead of x",
    "block_uses_norm1": "uses norm1 instead of norm2 (each sublayer has its own norm)",
    "block_normalises_attention_s_output":
        "normalises the attention's output instead of the residual stream x (the norm before the "
        "feed-forward reads x after the first residual, h = norm2(x))",
    "block_normalises_norm1_s_output":
        "normalises norm1's output h again (norm2(h)) instead of the residual stream x after the "
        "first residual (h = norm2(x))",
    "block_reads_block_s_input": "reads the block's input instead of the attention's output",
    "block_swaps_gate_proj_up":
        "swaps gate_proj and up_proj (the SiLU goes on gate_proj(h), which then multiplies "
        "up_proj(h))",
    "block_uses_gelu_silu_swiglu":
        "uses GELU instead of SiLU (SwiGLU's gate is silu(gate_proj(h)))",
    "block_uses_sigmoid_silu_glu":
        "uses the sigmoid instead of SiLU (GLU's gate; SwiGLU's is silu(z) = z * sigmoid(z))",
    "block_uses_relu_silu_swiglu":
        "uses ReLU instead of SiLU (SwiGLU's gate is silu(gate_proj(h)))",
    "block_leaves_out_silu_down": "leaves out the SiLU (down_proj(gate_proj(h) * up_proj(h)))",
    "block_applies_silu_after_product":
        "applies the SiLU after the product, silu(gate_proj(h) * up_proj(h)), instead of to "
        "gate_proj(h) alone (silu(gate_proj(h)) * up_proj(h))",
    "block_adds_up_proj_h":
        "adds up_proj(h) instead of multiplying by it (the gate multiplies: silu(gate_proj(h)) * "
        "up_proj(h))",
    "block_leaves_out_up_proj":
        "leaves out up_proj (down_proj(silu(gate_proj(h))): the gate multiplies up_proj(h))",
    "block_adds_block_s_input":
        "adds the block's input x instead of x after the first residual (the attention's output "
        "then never reaches the stream)",
    "block_adds_attention_s_output":
        "adds the attention's output instead of the residual stream x after the first residual",
    "block_attention_reads_x_norm1":
        "the attention reads x instead of norm1(x) (the norm1 step is left out; the residual adds "
        "x itself)",
    "block_norms_come_after_residual":
        "the norms come after the residual additions, x = norm(x + sublayer(x)) (post-norm, the "
        "2017 Transformer's), where this block is pre-norm: x + sublayer(norm(x))",
    "block_both_norms_layernorms_which":
        "both norms are LayerNorms (which subtract the mean first) where this block uses RMSNorm, "
        "nn.RMSNorm(d_model)",
    "block_both_residual_steps_left":
        "both residual steps are left out (the residual connections are missing: each sublayer's "
        "output must be added to its input, x = x + attn(norm1(x)), then x = x + ff(norm2(x)))",
    "block_both_dropout_steps_left":
        "both dropout steps are left out (dropout is never applied, also in training mode: "
        "self.drop on each sublayer's output)",
    "block_dropout_applies_sublayer_s":
        "the dropout applies to each sublayer's input (x before the norm) instead of its output: "
        "x = x + attn(norm1(drop(x))), where the exercise drops the output, x = x + "
        "drop(attn(norm1(x)))",
    "block_dropout_applies_sublayer_s_2":
        "the dropout applies to each sublayer's normalised input, drop(norm(x)), instead of its "
        "output: x = x + attn(drop(norm1(x))), where the exercise drops the output, x = x + "
        "drop(attn(norm1(x)))",
    "block_feed_forward_dropout_applies":
        "the feed-forward dropout applies inside the feed-forward, to the gated hidden "
        "silu(gate_proj(h)) * up_proj(h) (d_ff features) before down_proj, instead of to its "
        "output: x + drop(down_proj(...))",
    "block_dropout_applies_sum_x":
        "the dropout applies to the sum x + sublayer(x) instead of the sublayer's output before "
        "it is added to x",
    "block_dropout_on_sum_attention":
        "the attention sublayer's dropout applies to the residual stream, the sum x + "
        "attn(norm1(x)) (x = drop(x + attn(norm1(x)))), instead of to the sublayer's output "
        "before it is added to x (x = x + drop(attn(norm1(x))))",
    "block_dropout_on_sum_feed_forward":
        "the feed-forward sublayer's dropout applies to the residual stream, the sum x + "
        "ffn(norm2(x)) (x = drop(x + ffn(norm2(x)))), instead of to the sublayer's output "
        "before it is added to x (x = x + drop(ffn(norm2(x))))",
    "block_dropout_acts_eval_mode":
        "dropout acts in eval mode (the masks of the grader's seed applied): use self.drop, or "
        "F.dropout(..., training=self.training), which eval() turns off",
    "cached_block_call_attends_only_over":
        "each call attends only over the positions it is given, not over those the cache holds "
        "(pass the block's `cache` on to rotary_cached_attention; a fresh KVCache() only when "
        "cache is None)",
    "training_step_uses_batch_1_targets":
        "uses batch[:, :-1] as the targets too (the input tokens themselves, not the next ones: "
        "targets = batch[:, 1:])",
    "training_step_exchanges_inputs_batch_1":
        "exchanges them: inputs batch[:, 1:], targets batch[:, :-1] (the previous tokens; the "
        "model predicts the next: inputs = batch[:, :-1])",
    "training_step_softmax_given":
        "is given the softmax of the logits (F.cross_entropy applies log_softmax itself: pass the "
        "raw logits)",
    "training_step_sums_over_positions_reduction":
        "sums over the positions (reduction='sum') instead of the mean",
    "training_step_f_nll_loss_raw":
        "is F.nll_loss of the raw logits: nll_loss expects log-probabilities "
        "(F.log_softmax(logits, -1)); F.cross_entropy takes the logits themselves",
    "training_step_averages_over_batch_only":
        "averages over the batch only (the sum over the positions divided by B): the mean runs "
        "over all B * L predictions",
    "training_step_flattens_logits_l_b":
        "flattens the logits in (L, B) order but the targets in (B, L) order (a transpose before "
        "one flatten): each prediction is scored against another position's target",
    "training_step_scores_last_position_only":
        "scores the last position only (logits[:, -1] against batch[:, -1]) instead of every "
        "position: each of the L positions predicts its next token, and the mean runs over all B "
        "* L of them",
    "training_step_logits_those_whole_batch":
        "the logits are those of the whole batch, scored at positions 1 .. L against batch[:, 1:] "
        "(model(batch)[:, 1:]): each position is scored on its own token; the logits of batch[:, "
        ":-1] predict batch[:, 1:]",
    "training_step_parameters_did_change_no":
        "the parameters did not change (no update: optimizer.step() after loss.backward(), with "
        "optimizer.zero_grad() before the backward pass, not between it and the step)",
    "training_step_parameters_moved_two_optimizer":
        "the parameters moved by two optimizer steps (optimizer.step() called twice): one step "
        "per batch",
    "generation_reads_logits_0_first":
        "reads logits[:, 0] (the first position; the next token is predicted by the last)",
    "generation_passes_len_cache_1":
        "passes len(cache) + 1 (the newest token sits at position len(cache): positions count "
        "from 0)",
    "generation_passes_0_start_s":
        "passes 0 (start's default) after the prefill: the newest token sits at position "
        "len(cache)",
    "generation_logits_step_returned_probabilities":
        "the logits of each step are returned as probabilities (their softmax): return the logits "
        "themselves, logits[:, -1] of each step",
    # (i20steps) a product by the wrong tensor, a projection applied twice, the scale's size
    "weighted_sum_queries": "multiplies the weights by the queries instead of the values",
    "similarity_averages_over_heads_axis":
        "averages over a heads axis (dim=1) instead of over the batch (dim=0): the "
        "per-example (num_heads, num_heads) matrices are averaged over the batch",
    "gqa_one_kv_full_width":
        "counts one of k_proj and v_proj at full width (d_model outputs, as q_proj): both have "
        "num_kv_heads * head_dim outputs",
    "scale_by_size":
        "divides by sqrt({name}) = sqrt({size}), the size of {name}{meaning}, instead of sqrt(d_k) "
        "= sqrt({d_k})",
    "size_meaning": {"Lq": " (the number of queries)", "Lk": " (the number of keys)",
                     "L": " (the number of positions)", "batch": " (the first batch axis)",
                     "d_v": " (the values' features, value.shape[-1])"},
    "multihead_projection_twice":
        "applies {name}_proj twice ({name}_proj({name}_proj({role}))): each input is projected "
        "once",
    "multihead_never_splits":
        "is left out: the inputs are never split into heads, so all d_model features attend as "
        "one single head, scaled by sqrt(d_model) instead of each of the num_heads heads by "
        "sqrt(head_dim) (and with one weight matrix where there is one per head)",
    "multihead_output_projection_twice":
        "is applied twice (out_proj(out_proj(...))): W_O projects the merged heads once",
    "scale_which_head_dim":
        ": head_dim is the size of each head's features, d_model // num_heads (q.shape[-1] after "
        "the split)",
    # a step done on one of the query, key and value tensors only (_one_role_splits)
    "split_one_role": "{description} for the {role} alone",
    # the masked scores' fill value (_mask_fill_ways)
    "mask_fill_zero":
        "fills the masked scores with 0 (or multiplies the scores by the mask, or fills with a "
        "number close to 0 such as -1e-9 for -1e9) instead of -inf: 0 is no lower than the "
        "other scores, so the masked keys keep their weight after the softmax",
    "mask_added":
        "adds the mask to the scores (True = +1, False = +0) instead of filling the masked "
        "scores with -inf: a boolean mask is not an additive one",
    "mask_after_softmax":
        "the mask step comes after the softmax: the masked weights are set to 0 after it "
        "instead of the masked scores being filled with -inf before it, so each row's weights "
        "no longer sum to 1",
    # a sublayer of the block fed another tensor of the block than its own (_sublayer_reads)
    "block_tensors": {
        "sum": "x = x + attention, the first residual's sum (not normalised)",
        "input": "the block's input x (from before the first residual)",
        "norm1": "norm1(x), the attention's input",
    },
    "block_both_projections": "gate_proj and up_proj",
    "block_sublayer_reads": "gives {reader} {used}, instead of h = norm2(x)",
    # project_heads (project_heads_formula)
    "project_other_weights": "uses {used}_proj's weights instead of {meant}_proj's",
    "project_no_bias": "leaves out {name}_proj's bias",
}


class Formula(diagnose.Formula):
    """diagnose.Formula whose sentences show each step by its label in the language of now
    (MESSAGES["step_names"]; the code keeps the step's name)."""

    def label(self, name):
        return MESSAGES["step_names"].get(name, name)

    def left_out_meaning(self, name):
        return MESSAGES["left_out_means"].get(name, "")


# name -> function(dims, **options) -> Formula; each chapter's section adds its own
FORMULAS = {}


# ==== chapter 1 (and 4): single-head attention and its weights ============================

def _scores(value, x):
    return x["query"] @ x["key"].transpose(-2, -1)


def _masked(scores, x):
    mask = x.get("mask")
    if mask is None:
        return scores
    return scores.masked_fill(~mask, float("-inf"))


def _softmax_over(dim):
    def softmax(scores, _x):
        weights = torch.softmax(scores, dim=dim)
        return torch.nan_to_num(weights, nan=0.0)   # a fully masked row: zeros, never NaN
    return softmax


def _softmax_over_batch(axis):
    """The softmax step over a leading (batch) axis, for scores that have one there."""
    def softmax(scores, x):
        if scores.dim() < axis + 3:
            raise RuntimeError(f"no batch axis {axis}")   # no fit (Formula.mistakes)
        return _softmax_over(axis)(scores, x)
    return softmax


def _scale_variants(dims, d_k):
    """{description: step} of a scale by another named constant than 1/sqrt(d_k)."""
    right = 1.0 / math.sqrt(d_k)
    ways = {}
    if d_k / 2 != math.sqrt(d_k):  # ** binds tighter than /: d_k ** 1/2 is (d_k ** 1) / 2
        ways[MESSAGES["scale_half_d_k"].format(half=d_k / 2, d_k=d_k)] = \
            lambda s, _x: s / (d_k / 2)
    ways[MESSAGES["scale_twice_d_k"].format(twice=2 * d_k, d_k=d_k)] = lambda s, _x: s / (2 * d_k)
    for label, value in constant_names(dims).items():
        if value > 0 and not math.isclose(1.0 / value, right) and not math.isclose(value, 1.0):
            size = label[5:-1] if label.startswith("sqrt(") else None
            what = (MESSAGES["scale_times_constant"].format(label=label[2:], d_k=d_k)
                    if label.startswith("1/") else
                    MESSAGES["scale_by_size"].format(
                        name=size, size=dims[size], d_k=d_k,
                        meaning=MESSAGES["size_meaning"].get(size, ""))
                    if size in dims else
                    MESSAGES["scale_by_constant"].format(label=label, d_k=d_k))
            # why the root: the spread of a dot product of d_k terms (said of d_k itself, not
            # of another size that happens to equal it, d_v = d_k)
            if label == "d_k" and value == d_k:
                what += MESSAGES["scale_why_root"]
            elif label.startswith("sqrt(") and value != math.sqrt(d_k):
                what += MESSAGES["scale_which_d_k"]
            ways[what] = lambda s, _x, by=value: s / by
    ways.update(_float32_root(d_k, "d_k"))
    return ways


def _float32_root(size, label):
    """{description: step} of a scale by sqrt(size) rounded to float32 (a torch.sqrt of a
    float32 tensor), where it differs from the Python float math.sqrt(size)."""
    root32 = float(torch.tensor(float(size), dtype=torch.float32).sqrt())
    if root32 == math.sqrt(size):   # a perfect square: the same number
        return {}
    return {MESSAGES["scale_float32"].format(label=label, root=root32,
                                            rule=float32_sqrt_message().rstrip(".。")):
            lambda s, _x: s / root32 if isinstance(s, torch.Tensor)
            else _with(s, s=s["s"] / root32)}


def _product_variants():
    """{description: step} of the Q K^T product done with the wrong operands or order."""
    return {MESSAGES["product_computes_k_q_t"]:
            lambda _v, x: x["key"] @ x["query"].transpose(-2, -1),
            MESSAGES["product_multiplies_queries_themselves_q"]:
            lambda _v, x: x["query"] @ x["query"].transpose(-2, -1),
            MESSAGES["product_multiplies_keys_themselves_k"]:
            lambda _v, x: x["key"] @ x["key"].transpose(-2, -1)}


def _other_normalisations():
    """{description: softmax step} of the standard other ways to turn the scores into
    weights: a division by their sum without the exponential, a sigmoid of each score."""
    def without_exp(scores, _x):
        return scores / scores.sum(dim=-1, keepdim=True)

    return {MESSAGES["normalisation_without_exp"]: without_exp,
            MESSAGES["normalisation_sigmoid"]:
                lambda s, _x: torch.sigmoid(s)}


def attention_formula(dims, d_k, output=True):
    """softmax(mask(Q K^T / sqrt(d_k))) V (the weights alone when not `output`); inputs
    {"query", "key", "value", "mask" (bool, True = may attend, or None)}."""
    steps = [("Q K^T product", _scores),
             ("scale", lambda s, _x: s / math.sqrt(d_k)),
             ("mask", _masked),
             ("softmax", _softmax_over(-1))]
    variants = {"Q K^T product": _product_variants(),
                "scale": _scale_variants(dims, d_k),
                "mask": {MESSAGES["attention_uses_complement_mask_true"]:
                         lambda s, x: s if x.get("mask") is None
                         else s.masked_fill(x["mask"], float("-inf"))},
                "softmax": {MESSAGES["attention_runs_over_queries_dim"]:
                            _softmax_over(-2),
                            MESSAGES["attention_softmax_left_out"]: lambda s, _x: s,
                            MESSAGES["attention_comes_before_scale_weights"]:
                                lambda s, x: _softmax_over(-1)(s * math.sqrt(d_k), x)
                                / math.sqrt(d_k),
                            **{MESSAGES["softmax_batch_axis"].format(axis=axis):
                               _softmax_over_batch(axis) for axis in (0, 1)}}}
    # the scale and the softmax left out: variants, for their sentences' hint
    variants["scale"][MESSAGES["attention_scale_left_out"]] = \
        lambda s, _x: s
    # the softmax replaced by another normalisation: its exponential left out, or a sigmoid
    variants["softmax"].update(_other_normalisations())
    optional = ["mask"]
    if not output:   # the weights returned in another layout
        steps.append(("result", lambda w, _x: w))
        variants["result"] = {MESSAGES["attention_weights_transposed_one_row"]:
                              lambda w, _x: w.transpose(-2, -1)}
    if output:
        steps.append(("weighted sum", lambda w, x: w @ x["value"]))
        variants["weighted sum"] = {MESSAGES["attention_multiplies_weights_keys_values"]:
                                    lambda w, x: w @ x["key"],
                                    MESSAGES["weighted_sum_queries"]: lambda w, x: w @ x["query"],
                                    MESSAGES["attention_multiplies_transposed_weights_one"]:
                                        lambda w, x: w.transpose(-2, -1) @ x["value"],
                                    MESSAGES["attention_divides_output_sqrt_d"]:
                                    lambda w, x: w @ x["value"] / math.sqrt(d_k)}
    return Formula(steps, variants, optional)


FORMULAS["attention"] = attention_formula
FORMULAS["attention weights"] = (
    lambda dims, d_k: attention_formula(dims, d_k, output=False))


def scores_formula(dims, d_k):
    """attention_scores: Q K^T / sqrt(d_k), the scores before the softmax; inputs
    {"query", "key"}."""
    steps = [("Q K^T product", _scores),
             ("scale", lambda s, _x: s / math.sqrt(d_k)),
             ("output", lambda s, _x: s)]
    variants = {"Q K^T product": _product_variants(),
                "scale": _scale_variants(dims, d_k),
                "output": {MESSAGES["scores_output_is_softmax"]: _softmax_over(-1)}}
    variants["scale"][MESSAGES["attention_scale_left_out"]] = \
        lambda s, _x: s
    return Formula(steps, variants)


def softmax_formula(dims, dim):
    """stable_softmax(scores, dim): exp(s - max) / sum exp(s - max), the max and the sum
    along `dim`; inputs {"scores"}. The first step chooses the axis the reductions run
    along, so that one variant moves both."""
    def reduce(kind):
        def step(state, _x):
            s, axis = state["s"], state["dim"]
            if kind == "max":
                return _with(state, s=s - s.amax(dim=axis, keepdim=True))
            if kind == "exp":
                return _with(state, s=s.exp())
            total = s.sum() if axis is None else s.sum(dim=axis, keepdim=True)
            return _with(state, s=s / total)
        return step

    steps = [("reduction axis", lambda _v, x: {"s": x["scores"], "dim": dim}),
             ("subtraction of the maximum", reduce("max")),
             ("exponential", reduce("exp")),
             ("division by the sum", reduce("sum")),
             ("result", lambda state, _x: state["s"])]
    variants = {"reduction axis": {MESSAGES["softmax_last_axis"].format(dim=dim):
                                   lambda _v, x: {"s": x["scores"], "dim": -1}},
                "subtraction of the maximum": {
                    MESSAGES["softmax_takes_maximum_along_last"]:
                    lambda state, _x: _with(state, s=state["s"] - state["s"].amax(
                        dim=-1, keepdim=True))},
                "division by the sum": {
                    MESSAGES["softmax_sums_whole_tensor_along"]:
                    lambda state, _x: _with(state, s=state["s"] / state["s"].sum()),
                    MESSAGES["softmax_sums_along_last_axis"]:
                    lambda state, _x: _with(state, s=state["s"] / state["s"].sum(
                        dim=-1, keepdim=True)),
                    MESSAGES["softmax_divides_sum_exp_scores"]:
                    lambda state, x: _with(state, s=state["s"] / x["scores"].exp().sum(
                        dim=state["dim"], keepdim=True))},
                "result": {MESSAGES["softmax_result_log"]:
                           lambda state, _x: state["s"].log()}}
    variants["division by the sum"][MESSAGES["softmax_left_out_exp_scores"]] = \
        lambda state, _x: state
    # (scores - max) / sum(scores - max): a normalisation without the exp
    return Formula(steps, variants, optional=["exponential"])


def entropy_formula(dims):
    """attention_entropy(weights): -sum_k w log w over the keys (the last axis), in nats,
    with 0 log 0 = 0; inputs {"weights"}."""
    reductions = {MESSAGES["entropy_takes_mean_sum"]: lambda t: t.mean(dim=-1),
                  MESSAGES["entropy_takes_largest_term_sum"]: lambda t: t.amax(dim=-1),
                  MESSAGES["entropy_sums_over_queries_dim"]:
                      lambda t: t.sum(dim=-2),
                  MESSAGES["entropy_sums_over_first_axis"]:
                      lambda t: t.sum(dim=0) if t.dim() > 2 else _no_fit("no batch axis")}
    def w_log_w(base):
        return lambda _v, x: torch.special.xlogy(x["weights"], x["weights"]) / math.log(base)

    steps = [("w log w", lambda _v, x: torch.special.xlogy(x["weights"], x["weights"])),
             ("sum over the keys", lambda t, _x: t.sum(dim=-1)),
             ("minus sign", lambda t, _x: -t),
             ("result", lambda t, _x: t)]
    variants = {"w log w": {MESSAGES["entropy_uses_log_base_2"]: w_log_w(2),
                            MESSAGES["entropy_uses_log_base_10"]:
                            w_log_w(10),
                            MESSAGES["entropy_taken_softmax_weights_weights"]:
                            lambda _v, x: torch.special.xlogy(x["weights"].softmax(-1),
                                                              x["weights"].softmax(-1)),
                            MESSAGES["entropy_log_w_alone_without"]:
                            lambda _v, x: torch.log(x["weights"])},
                "sum over the keys": {what: (lambda t, _x, r=r: r(t))
                                      for what, r in reductions.items()},
                "minus sign": {MESSAGES["entropy_left_out_entropy_negative"]: lambda t, _x: t},
                "result": {MESSAGES["entropy_divided_log_lk_largest"]:
                           lambda t, x: t / math.log(x["weights"].shape[-1]),
                           MESSAGES["entropy_perplexity"]:
                           lambda t, _x: t.exp()}}
    # the terms -w log w returned one per key: the sum over the keys (the last axis) missing
    return Formula(steps, variants, optional=["sum over the keys"])


def _no_fit(why):
    """Raised by a variant that does not apply to these inputs (Formula.mistakes skips it)."""
    raise RuntimeError(why)


FORMULAS["attention scores"] = scores_formula
FORMULAS["stable softmax"] = softmax_formula
FORMULAS["attention entropy"] = entropy_formula


# ==== chapters 2 and 3 (and 6): multi-head and grouped-query attention ====================

def _linear(x, inputs, name, bias=True):
    """x W^T + b with the weights inputs[name + "_w"] (out, in) and inputs[name + "_b"]."""
    return torch.nn.functional.linear(x, inputs[f"{name}_w"],
                                      inputs.get(f"{name}_b") if bias else None)


def _split_heads(t, h, how="transpose"):
    """(B, L, h * hd) -> (B, h, L, hd): the view and transpose; "view": the reshape alone;
    "interleaved": head i takes features i, i + h, ..."""
    B, L, D = t.shape
    if how == "view":
        return t.reshape(B, h, L, D // h)
    if how == "interleaved":
        return t.reshape(B, L, D // h, h).permute(0, 3, 1, 2)
    return t.reshape(B, L, h, D // h).transpose(1, 2)


def _merge_heads(t, how="transpose"):
    """(B, h, L, hd) -> (B, L, h * hd), and its two mistakes (as _split_heads)."""
    B, h, L, hd = t.shape
    if how == "view":
        return t.reshape(B, L, h * hd)
    if how == "interleaved":
        return t.permute(0, 2, 3, 1).reshape(B, L, h * hd)
    return t.transpose(1, 2).reshape(B, L, h * hd)


def _with(state, **changes):
    return {**state, **changes}


# the mask step read the other way round, for any formula with a boolean mask (True = may
# attend): the scores filled where the mask is True; with a plain softmax, a query whose
# keys are all filled gets NaN (the together mistake), with a safe one zeros
# (MESSAGES["mask_complement"], and its together sentence MESSAGES["mask_complement_nan"])


def _complement_nan():
    """The together sentence of the mask read the other way round with a plain softmax."""
    return MESSAGES["mask_complement_nan"].format(complement=MESSAGES["mask_complement"])


def _masked_complement(scores, x):
    """The scores filled with -inf where the mask x["mask"] (or None: no mask) is True."""
    mask = x.get("mask")
    if mask is None:
        return scores
    return scores.masked_fill(mask, float("-inf"))


def _mask_fill_ways():
    """{sentence: mask step} of the masked scores filled with another value than -inf, for a
    formula that carries a state {"s": scores (..., Lq, Lk), ...} and a boolean mask
    x["mask"] (True = may attend; None: no mask, no fit): filled with 0 (the same numbers as
    a product with the mask), and the mask added as if it were a float one."""
    def filled(make):
        def step(st, x):
            if x.get("mask") is None:
                raise RuntimeError("no mask")   # no fit (Formula.mistakes)
            return _with(st, s=make(st["s"], x["mask"]))
        return step
    return {MESSAGES["mask_fill_zero"]: filled(lambda s, mask: s.masked_fill(~mask, 0.0)),
            MESSAGES["mask_added"]: filled(lambda s, mask: s + mask)}


def _softmax_then_mask(st, x):
    """The softmax of the unmasked scores st["s"], then the masked weights set to 0 (the mask
    step moved past the softmax); no mask: no fit."""
    if x.get("mask") is None:
        raise RuntimeError("no mask")
    return _with(st, w=torch.softmax(st["s"], dim=-1).masked_fill(~x["mask"], 0.0))


def _one_role_splits(h, g):
    """{sentence: split step} of the split into heads done another way (without the
    transpose, interleaved) for one of the query, key and value tensors only, the others
    split right; the state {"q", "k", "v"} of (B, L, heads * head_dim) tensors, q in h heads,
    k and v in g."""
    ways = {}
    for how, description in (("view", MESSAGES["multihead_reshapes_without_transpose"]),
                             ("interleaved", MESSAGES["multihead_interleaves_heads_features"])):
        for role, name in (("query", "q"), ("key", "k"), ("value", "v")):
            sentence = MESSAGES["split_one_role"].format(description=description,
                                                         role=MESSAGES["roles"][role])
            ways[sentence] = lambda st, _x, n=name, how=how: _with(st, **{
                m: _split_heads(st[m], h if m == "q" else g, how if m == n else "transpose")
                for m in "qkv"})
    return ways


def multihead_formula(dims, num_heads, output=True, num_kv_heads=None):
    """Multi-head attention: project query, key, value (weights "q_w", "q_b", "k_w", ...,
    "o_w", "o_b" of the inputs, nn.Linear's layout), split into num_heads heads, Q K^T,
    scale by 1/sqrt(head_dim), mask ("mask", True = may attend, or None), softmax over the
    keys, weighted sum of the values, merge, output projection. output=False: the weights
    (B, num_heads, Lq, Lk). num_kv_heads: keys and values split into that many heads, each
    repeated for num_heads // num_kv_heads query heads (grouped-query attention)."""
    h = num_heads
    g = num_kv_heads or num_heads

    def head_dim(state):
        return state["q"].shape[-1]

    def project(_value, x, q="q", k="k", v="v", bias=True, v_input="value", q_input="query",
                k_input="key"):
        return {"q": _linear(x[q_input], x, q, bias), "k": _linear(x[k_input], x, k, bias),
                "v": _linear(x[v_input], x, v, bias)}

    def split(how):
        return lambda st, _x: _with(st, q=_split_heads(st["q"], h, how),
                                    **{n: _split_heads(st[n], g, how) for n in "kv"})

    def split_by_head_dim(st, _x):
        """The split with num_heads and head_dim exchanged: d_model // num_heads heads of
        num_heads features each (no fit where the two are equal, or with grouped keys)."""
        D = st["q"].shape[-1]
        if D // h == h or g != h:
            raise RuntimeError("num_heads == head_dim: the same split")
        return _with(st, **{n: _split_heads(st[n], D // h, "transpose") for n in "qkv"})

    def one_head(st, _x):
        """Never split: all d_model features attend as one head, so the scale (sqrt of the
        head's features) is sqrt(d_model); no fit with grouped keys (g != h)."""
        if g != h or h == 1:
            raise RuntimeError("one head of all features: only where every head has its keys")
        return _with(st, **{n: _split_heads(st[n], 1, "transpose") for n in "qkv"})

    def causal(st, x):
        """A causal mask of the student's own where the exercise passes none (no fit where
        a mask is given)."""
        if x.get("mask") is not None:
            raise RuntimeError("a mask is given")
        future = torch.ones(st["s"].shape[-2:], dtype=torch.bool,
                            device=st["s"].device).triu(1)
        return _with(st, s=st["s"].masked_fill(future, float("-inf")))

    def repeat(tiled=False):
        def step(st, _x):
            if tiled:
                return _with(st, **{n: st[n].repeat(1, h // g, 1, 1) for n in "kv"})
            return _with(st, **{n: st[n].repeat_interleave(h // g, dim=1) for n in "kv"})
        return step

    def scale_by(divisor):
        return lambda st, _x: _with(st, s=st["s"] / divisor(st))

    def softmax(dim):
        return lambda st, _x: _with(st, w=torch.nan_to_num(torch.softmax(st["s"], dim=dim),
                                                          nan=0.0))

    def merge(how):
        return lambda st, _x: _with(st, o=_merge_heads(st["o"], how))

    steps = [("projection", project),
             ("split into heads", split("transpose")),
             ("repeat of the key/value heads", repeat()),
             ("Q K^T product", lambda st, _x: _with(st, s=st["q"] @ st["k"].transpose(-2, -1))),
             ("scale", scale_by(lambda st: math.sqrt(head_dim(st)))),
             ("mask", lambda st, x: _with(st, s=_masked(st["s"], x))),
             ("softmax", softmax(-1))]
    scale_ways = {MESSAGES["multihead_scale_constant"].format(label=label)
                  + (MESSAGES["scale_which_head_dim"] if label.startswith("sqrt(") else ""):
                  scale_by(lambda st, value=value: value)
                  for label, value in constant_names(dims).items()
                  if value > 1 and label != "sqrt(head_dim)"}
    # the scale turned upside down: Q K^T * sqrt(head_dim)
    scale_ways[MESSAGES["multihead_multiplies_sqrt_head_dim"]] = scale_by(
        lambda st: 1 / math.sqrt(head_dim(st)))
    # sqrt(head_dim) held by a float32 number: visible in the float64 runs only (common.py's
    # one rule and message for it, in every chapter)
    scale_ways[MESSAGES["multihead_scale_float32"].format(
        rule=float32_sqrt_message().rstrip(".。"))] = scale_by(
        lambda st: float(torch.tensor(float(head_dim(st)), dtype=torch.float32).sqrt()))
    variants = {
        "projection": {
            MESSAGES["multihead_projects_keys_q_proj"]: lambda st, x: project(st, x, k="q"),
            MESSAGES["multihead_projects_values_k_proj"]: lambda st, x: project(st, x, v="k"),
            MESSAGES["multihead_projects_queries_k_proj"]:
                lambda st, x: project(st, x, q="k", k="q"),
            MESSAGES["multihead_projects_key_input_values"]:
                lambda st, x: project(st, x, v_input="key"),
            MESSAGES["multihead_projects_key_input_queries"]:
                lambda st, x: project(st, x, q_input="key"),
            MESSAGES["multihead_projects_query_input_keys"]:
                lambda st, x: project(st, x, k_input="query", v_input="query"),
            MESSAGES["multihead_leaves_out_input_projections"]:
                lambda st, x: project(st, x, bias=False),
            **{MESSAGES["multihead_projection_left_out"].format(
                role=MESSAGES["roles"][role], name=name):
               lambda st, x, n=name, r=role: {**project(st, x), n: x[r]}
               for name, role in (("q", "query"), ("k", "key"), ("v", "value"))},
            MESSAGES["multihead_exchanges_keys_values"]: lambda st, x: {**project(st, x),
                                                       "k": project(st, x)["v"],
                                                       "v": project(st, x)["k"]},
            **{MESSAGES["multihead_projection_twice"].format(name=name, role=role):
               lambda st, x, n=name: {**project(st, x), n: _linear(project(st, x)[n], x, n)}
               for name, role in (("q", "query"), ("k", "key"), ("v", "value"))}},
        "split into heads": {MESSAGES["multihead_reshapes_without_transpose"]: split("view"),
                             MESSAGES["multihead_interleaves_heads_features"]: split("interleaved"),
                             MESSAGES["multihead_cuts_d_model_into"]: split_by_head_dim,
                             MESSAGES["multihead_never_splits"]: one_head},
        "mask": {MESSAGES["multihead_adds_causal_mask_query"]: causal},
        "repeat of the key/value heads": {
            MESSAGES["multihead_tiles_key_value_heads"]: repeat(tiled=True)},
        "Q K^T product": {MESSAGES["product_computes_k_q_t"]:
                          lambda st, _x: _with(st, s=st["k"] @ st["q"].transpose(-2, -1)),
                          MESSAGES["product_multiplies_queries_themselves_q"]:
                          lambda st, _x: _with(st, s=st["q"] @ st["q"].transpose(-2, -1)),
                          MESSAGES["product_multiplies_keys_themselves_k"]:
                          lambda st, _x: _with(st, s=st["k"] @ st["k"].transpose(-2, -1))},
        "scale": scale_ways,
        "softmax": {MESSAGES["multihead_runs_over_queries_dim"]: softmax(-2),
                    MESSAGES["multihead_runs_over_heads_dim"]: softmax(1),
                    MESSAGES["multihead_runs_over_batch_dim"]: softmax(0),
                    MESSAGES["multihead_comes_before_scale_weights"]: lambda st, x: _with(
                        st, w=softmax(-1)(_with(st, s=st["s"] * math.sqrt(head_dim(st))),
                                          x)["w"] / math.sqrt(head_dim(st)))},
    }
    skips = {"scale": None, "mask": None,
             "softmax": lambda st, _x: _with(st, w=st["s"])}
    if output:
        steps += [("weighted sum", lambda st, _x: _with(st, o=st["w"] @ st["v"])),
                  ("merge of the heads", merge("transpose")),
                  ("output projection", lambda st, x: _linear(st["o"], x, "o"))]
        variants["weighted sum"] = {
            MESSAGES["attention_multiplies_weights_keys_values"]:
                lambda st, _x: _with(st, o=st["w"] @ st["k"]),
            MESSAGES["weighted_sum_queries"]: lambda st, _x: _with(st, o=st["w"] @ st["q"]),
            MESSAGES["multihead_divides_sqrt_head_dim"]:
                lambda st, _x: _with(st, o=st["w"] @ st["v"] / math.sqrt(head_dim(st)))}
        variants["merge of the heads"] = {MESSAGES["multihead_reshapes_without_transpose"]:
                                              merge("view"),
                                          MESSAGES["multihead_interleaves_heads_features"]:
                                              merge("interleaved")}
        variants["output projection"] = {
            MESSAGES["multihead_leaves_out_output_bias"]:
                lambda st, x: _linear(st["o"], x, "o", bias=False),
            MESSAGES["multihead_multiplies_w_o_untransposed"]:
                lambda st, x: st["o"] @ x["o_w"] + (0 if x.get("o_b") is None else x["o_b"]),
            MESSAGES["multihead_adds_query_residual_output"]:
                lambda st, x: _linear(st["o"], x, "o") + x["query"],
            MESSAGES["multihead_output_projection_twice"]:
                lambda st, x: _linear(_linear(st["o"], x, "o"), x, "o"),
            # the chapter 3 view, sum_i head_i W_O^i + b_O: the per-head terms done wrong
            MESSAGES["multihead_uses_only_diagonal_blocks"]: lambda st, x: _linear(
                st["o"], {"o_w": _diagonal_blocks(x["o_w"], h), "o_b": x.get("o_b")}, "o"),
            MESSAGES["multihead_adds_b_o_once"]:
                lambda st, x: _linear(st["o"], x, "o", bias=False)
                + (0 if x.get("o_b") is None else h * x["o_b"])}
        skips["output projection"] = lambda st, _x: st["o"]
        # W_O applied to the wrong tensor: the projected values, before the attention
        together = {MESSAGES["multihead_output_projection_w_o"]: {
                        "projection": lambda st, x: _with(
                            project(st, x), v=_linear(project(st, x)["v"], x, "o")),
                        "output projection": lambda st, _x: st["o"]}}
    else:
        steps.append(("weights", lambda st, _x: st["w"]))
        variants["weights"] = {
            MESSAGES["multihead_returns_transposed_b_num"]:
                lambda st, _x: st["w"].transpose(-2, -1)}
        together = {}
    # the mask read the other way round (True = may attend): the fill where it is True
    variants["mask"] = {**variants["mask"],
                        MESSAGES["mask_complement"]:
                            lambda st, x: _with(st, s=_masked_complement(st["s"], x)),
                        **_mask_fill_ways()}
    variants["split into heads"].update(_one_role_splits(h, g))
    together[MESSAGES["mask_after_softmax"]] = {"mask": lambda st, _x: st,
                                                "softmax": _softmax_then_mask}
    together[_complement_nan()] = {
        "mask": lambda st, x: _with(st, s=_masked_complement(st["s"], x)),
        "softmax": lambda st, _x: _with(st, w=torch.softmax(st["s"], dim=-1))}
    return Formula(steps, variants, skips, together)


FORMULAS["multi-head attention"] = multihead_formula
FORMULAS["multi-head weights"] = (
    lambda dims, num_heads: multihead_formula(dims, num_heads, output=False))


def _diagonal_blocks(weight, h):
    """`weight` (D, h * hd), nn.Linear's layout of W_O, with only its h diagonal (hd, hd)
    blocks kept: head i reaches only its own slice of the output. A RuntimeError where
    D != h * hd (no such blocks)."""
    size = weight.shape[1] // h
    if weight.shape[0] != weight.shape[1]:
        raise RuntimeError("W_O is not square: it has no diagonal blocks")
    return torch.block_diag(*[weight[i * size:(i + 1) * size, i * size:(i + 1) * size]
                              for i in range(h)])


# ---- chapter 3, exercise 1: output_projection_by_heads ------------------------------------

def projection_by_heads_formula(dims, num_heads):
    """Concat(head_0, ..., head_{h-1}) W_O + b_O = sum_i head_i W_O^i + b_O, with W_O^i the
    i-th block of head_dim rows of W_O (x @ W convention). Inputs {"heads" (B, h, L, hd),
    "W_O" (h * hd, d_model), "b_O" (d_model,) or None}; the output is (B, L, d_model). The
    state between steps: "c" the concatenation (B, L, h * hd), "W" the heads' blocks
    (h, hd, d_model), "terms" head_i W_O^i (B, L, h, d_model), "o" their sum."""
    h = num_heads

    def concatenate(how):
        return lambda _v, x: {"c": _merge_heads(x["heads"], how)}

    def blocks(how):
        def step(st, x):
            W = x["W_O"]
            hd, d = W.shape[0] // h, W.shape[1]
            if how == "interleaved":        # W_O.view(head_dim, num_heads, d_model)
                found = W.reshape(hd, h, d).transpose(0, 1)
            elif how == "first":            # W_O[:head_dim] for every head
                found = W[:hd].expand(h, hd, d)
            elif how == "diagonal":         # W_O^i restricted to head i's own columns
                found = _diagonal_blocks(W.T, h).T.reshape(h, hd, d)
            elif how == "transposed":       # W_O.T, as if it were out_proj.weight
                if W.shape[0] != W.shape[1]:
                    raise RuntimeError("W_O is not square: its transpose does not fit")
                found = W.T.reshape(h, hd, d)
            elif how == "identity":         # no W_O: each head stays in its own slice
                if h * hd != d:
                    raise RuntimeError("without W_O the output would not have d_model features")
                found = torch.eye(d, dtype=W.dtype, device=W.device).reshape(h, hd, d)
            else:                           # rows [i * hd, (i + 1) * hd) for head i
                found = W.reshape(h, hd, d)
            return _with(st, W=found)
        return step

    def products(st, _x):
        B, L, _ = st["c"].shape
        c = st["c"].reshape(B, L, h, -1)                               # (B, L, h, hd)
        return _with(st, terms=torch.einsum("blhk,hkd->blhd", c, st["W"]))

    def products_by_position(st, x):
        """heads[:, :, i] @ W_O^i: position i of every head (B, h, hd) in place of head i
        at every position; terms (B, h, h, d_model) (no fit with fewer positions than
        heads)."""
        heads = x["heads"]
        if heads.shape[2] < h:
            raise RuntimeError("fewer positions than heads")
        # term i, row r: heads[:, r, i] @ W_O^i; the sum runs over i (axis 2)
        return _with(st, terms=torch.einsum("brik,ikd->brid", heads[:, :, :h], st["W"]))

    def bias(times=1):
        return lambda st, x: st["o"] if x.get("b_O") is None else st["o"] + times * x["b_O"]

    steps = [("concatenation", concatenate("transpose")),
             ("projection by W_O", blocks("rows")),
             ("per-head products", products),
             ("sum over the heads", lambda st, _x: _with(st, o=st["terms"].sum(2))),
             ("bias b_O", bias())]
    variants = {
        "concatenation": {MESSAGES["projection_by_heads_reshapes_without_transpose_heads"]:
                          concatenate("view"),
                          MESSAGES["multihead_interleaves_heads_features"]:
                              concatenate("interleaved")},
        "projection by W_O": {
            MESSAGES["projection_by_heads_cuts_w_o_into"]: blocks("interleaved"),
            MESSAGES["projection_by_heads_gives_every_head_first"]: blocks("first"),
            MESSAGES["projection_by_heads_uses_w_o_transposed"]: blocks("transposed"),
            MESSAGES["multihead_uses_only_diagonal_blocks"]: blocks("diagonal")},
        "per-head products": {MESSAGES["projection_by_heads_indexes_positions_heads_heads"]:
                              products_by_position},
        "sum over the heads": {MESSAGES["projection_by_heads_averages_heads_summing"]:
                               lambda st, _x: _with(st, o=st["terms"].mean(2)),
                               MESSAGES["projection_by_heads_leaves_out_last_head"]:
                               lambda st, _x: _with(st, o=st["terms"][:, :, :-1].sum(2)),
                               MESSAGES["projection_by_heads_leaves_out_first_head"]:
                               lambda st, _x: _with(st, o=st["terms"][:, :, 1:].sum(2)),
                               MESSAGES["projection_by_heads_sums_over_positions_l"]:
                               lambda st, _x: _with(st, o=st["terms"].sum(1))},
        "bias b_O": {MESSAGES["projection_by_heads_adds_b_o_once"]:
                     bias(h),
                     MESSAGES["projection_by_heads_adds_b_o_twice"]: bias(2)}}
    skips = {"projection by W_O": blocks("identity"), "bias b_O": lambda st, _x: st["o"]}
    return Formula(steps, variants, skips)


FORMULAS["output projection by heads"] = projection_by_heads_formula


# ---- chapter 3, exercise 3: load_from_torch -------------------------------------------------

def loaded_weight_formula(dims, name, part):
    """What load_from_torch must leave in ours' `name` ("q", "k", "v", "o") projection's
    `part` ("weight", "bias"): the tensor of nn.MultiheadAttention that holds it
    (in_proj_weight.chunk(3)[i], or q_proj_weight ... where kdim or vdim differ; in_proj_bias
    .chunk(3)[i]; out_proj), copied as it is. Inputs: torch_mha's named_parameters and
    "stale" (what ours held before the call)."""
    def source(which, transposed=False):
        def step(_v, x):
            if which == "o":
                found = x[f"out_proj.{part}"]
            elif f"in_proj_{part}" in x:
                found = x[f"in_proj_{part}"].chunk(3)[dict(q=0, k=1, v=2)[which]]
            else:
                found = x[f"{which}_proj_{part}"]   # a KeyError where there is none
            return found.T if transposed else found
        return step

    variants = {"source": {}}
    if name != "o":
        stack = MESSAGES["loaded_stack_weight" if part == "weight" else "loaded_stack_bias"]
        letters = "w_q, w_k, w_v" if part == "weight" else "b_q, b_k, b_v"
        separate = MESSAGES["loaded_separate"] if part == "weight" else ""
        for other in "qkv":
            if other != name:
                variants["source"][MESSAGES["loaded_other_order"].format(
                    other=other, part=part, name=name, stack=stack, letters=letters,
                    separate=separate)] = source(other)
    else:
        for other in "qkv":
            variants["source"][MESSAGES["loaded_in_place_of_out"].format(
                other=other, part=part, index="qkv".index(other))] = source(other)
    if part == "weight":
        variants["source"][MESSAGES["loaded_weight_copies_transpose_torch_s"]] = source(name, True)
    hint = (MESSAGES["loaded_hint_out"] if name == "o" else
            MESSAGES["loaded_hint_bias"] if part == "bias" else "")
    # the copy left out: ours keeps what it held (a variant, for the sentence's hint)
    variants["copy"] = {MESSAGES["loaded_left_out"].format(hint=hint):
                        lambda _v, x: x["stale"]}
    steps = [("source", source(name)), ("copy", lambda value, _x: value)]
    return Formula(steps, variants)


FORMULAS["loaded weight"] = loaded_weight_formula


# ---- chapter 3, exercise 4: count_parameters ------------------------------------------------

def parameter_count_formula(dims):
    """d_model (query_size + key_size + value_size + d_model) + 4 d_model (no biases when
    bias=False), the count of MultiHeadAttention's parameters, for several layer shapes at
    once: inputs {"d_model", "num_heads", "query_size", "key_size", "value_size", "bias"
    (1 or 0)}, each a float64 tensor (one entry per layer shape)."""
    def inputs(x):
        return x["query_size"] + x["key_size"] + x["value_size"]

    def d(x):
        return x["d_model"]

    steps = [("W_Q, W_K, W_V", lambda _v, x: inputs(x) * d(x)),
             ("W_O", lambda n, x: n + d(x) * d(x)),
             ("biases", lambda n, x: n + 4 * d(x) * x["bias"])]
    variants = {
        "W_Q, W_K, W_V": {
            MESSAGES["parameter_count_counts_whole_input_size"]:
                lambda _v, x: x["num_heads"] * inputs(x) * d(x),
            MESSAGES["parameter_count_counts_only_one_head"]:
                lambda _v, x: inputs(x) * d(x) / x["num_heads"],
            MESSAGES["parameter_count_ignores_query_size_key"]: lambda _v, x: 3 * d(x) * d(x)},
        "W_O": {MESSAGES["parameter_count_counts_w_o_once"]:
                    lambda n, x: n + x["num_heads"] * d(x) * d(x),
                MESSAGES["parameter_count_counts_only_one_head_2"]:
                    lambda n, x: n + d(x) * d(x) / x["num_heads"],
                MESSAGES["parameter_count_counts_w_o_value"]:
                    lambda n, x: n + x["value_size"] * d(x),
                MESSAGES["parameter_count_left_out_out_proj"]:
                    lambda n, _x: n},
        "biases": {MESSAGES["parameter_count_leaves_out_output_projection"]:
                       lambda n, x: n + 3 * d(x) * x["bias"],
                   MESSAGES["parameter_count_ignores_bias_false_counts"]: lambda n, x: n + 4 * d(x),
                   MESSAGES["parameter_count_counts_only_one_head_3"]:
                       lambda n, x: n + 4 * d(x) * x["bias"] / x["num_heads"]}}
    # the biases left out (a variant rather than an optional step, for the sentence's hint)
    variants["biases"][MESSAGES["parameter_count_left_out_four_nn"]] = lambda n, _x: n
    return Formula(steps, variants)


FORMULAS["parameter count"] = parameter_count_formula
def split_formula(dims, num_heads):
    """split_heads(x, num_heads): (B, L, d_model) -> (B, num_heads, L, head_dim), d_model cut
    as (num_heads, head_dim) (head i holds features [i*head_dim, (i+1)*head_dim)), then
    transpose(1, 2); inputs {"x"}."""
    def cut(order):
        def step(_v, x):
            B, L, D = x["x"].shape
            if order == "heads first":
                return x["x"].reshape(B, L, num_heads, D // num_heads)
            return x["x"].reshape(B, L, D // num_heads, num_heads).transpose(-2, -1)
        return step

    def straight(transposed):
        def step(_v, x):
            B, L, D = x["x"].shape
            t = x["x"].transpose(1, 2) if transposed else x["x"]
            return t.reshape(B, num_heads, L, D // num_heads)
        return step

    steps = [("cut of d_model into (num_heads, head_dim)", cut("heads first")),
             ("transpose(1, 2)", lambda t, _x: t.transpose(1, 2))]
    variants = {"cut of d_model into (num_heads, head_dim)": {
        MESSAGES["split_cuts_head_dim_num"]: cut("head_dim first"),
        MESSAGES["split_numbers_heads_reverse_order"]:
            lambda t, x: cut("heads first")(t, x).flip(2)}}
    keep = {"transpose(1, 2)": lambda t, _x: t}
    together = {
        MESSAGES["split_x_reshaped_straight_b"]: {
            "cut of d_model into (num_heads, head_dim)": straight(False), **keep},
        MESSAGES["split_x_transposed_b_d"]: {
            "cut of d_model into (num_heads, head_dim)": straight(True), **keep}}
    return Formula(steps, variants, together=together)


def merge_formula(dims):
    """merge_heads(x): (B, num_heads, L, head_dim) -> (B, L, d_model): transpose(1, 2) to
    (B, L, num_heads, head_dim), then flatten (num_heads, head_dim) into d_model (head i
    fills features [i*head_dim, (i+1)*head_dim)); inputs {"x"}."""
    def flatten(t, x):
        B, h, L, hd = x["x"].shape
        return t.reshape(B, L, h * hd)

    steps = [("transpose(1, 2)", lambda _v, x: x["x"].transpose(1, 2)),
             ("flatten of (num_heads, head_dim)", flatten)]
    variants = {"transpose(1, 2)": {
        MESSAGES["merge_left_out_reshape_b"]: lambda _v, x: x["x"],
        MESSAGES["merge_swaps_last_two_axes"]: lambda _v, x: x["x"].transpose(2, 3),
        MESSAGES["merge_puts_head_dim_before"]: lambda _v, x: x["x"].permute(0, 2, 3, 1)},
        "flatten of (num_heads, head_dim)": {
        MESSAGES["merge_puts_heads_side_side"]:
            lambda t, x: flatten(t.flip(2), x),
        MESSAGES["merge_sums_heads_over_num"]: lambda t, _x: t.sum(dim=2),
        MESSAGES["merge_averages_heads_over_num"]:
            lambda t, _x: t.mean(dim=2),
        MESSAGES["merge_concatenates_heads_along_positions"]:
            lambda _t, x: x["x"].reshape(x["x"].shape[0], -1, x["x"].shape[-1])}}
    return Formula(steps, variants)


def fuse_formula(dims):
    """fuse_head_weights(w): (num_heads, in_features, head_dim), head i's W_i in the x @ W
    convention -> nn.Linear's weight (num_heads * head_dim, in_features): each W_i
    transposed to (head_dim, in_features), the heads stacked in order along the rows;
    inputs {"w"}."""
    def stack(t, x):
        h, n, hd = x["w"].shape
        return t.reshape(h * hd, n)

    steps = [("transpose of each W_i", lambda _v, x: x["w"].transpose(1, 2)),
             ("stack of the heads along the rows", stack)]
    variants = {
        "transpose of each W_i": {
            MESSAGES["fuse_left_out_plain_reshape"]: lambda _v, x: x["w"],
            MESSAGES["fuse_uses_w_t_transpose"]:
            lambda _v, x: x["w"].transpose(0, 2),
            MESSAGES["fuse_puts_head_dim_first"]: lambda _v, x: x["w"].permute(2, 0, 1)},
        "stack of the heads along the rows": {
            MESSAGES["fuse_puts_heads_reverse_order"]: lambda t, x: stack(t.flip(0), x)}}
    return Formula(steps, variants)


def head_projection_formula(dims, i, num_heads):
    """head_projection(x, weight, bias, i, num_heads): head i's block of nn.Linear's
    weight (d_model, in_features), rows [i*head_dim, (i+1)*head_dim), and of its bias, then
    x W_i^T + b_i; inputs {"x", "weight", "bias" (or None)}."""
    def rows(which, size_from="weight"):
        def step(_v, x):
            # head_dim = d_model // num_heads, d_model = the weight's rows ("x": its features)
            features = x["x"].shape[-1] if size_from == "x" else x["weight"].shape[0]
            head_dim = features // num_heads
            block = (slice(i, None, num_heads) if which == "strided"
                     else slice(i, i + head_dim) if which == "from i"
                     else slice(which * head_dim, (which + 1) * head_dim))
            bias = x.get("bias")
            return {"w": x["weight"][block], "b": None if bias is None else bias[block]}
        return step

    def columns(_v, x):
        head_dim = x["weight"].shape[0] // num_heads
        block = slice(i * head_dim, (i + 1) * head_dim)
        bias = x.get("bias")
        return {"w": x["weight"][:, block].transpose(0, 1),
                "b": None if bias is None else bias[block]}

    def add_bias(state, _x):
        return state["y"] if state["b"] is None else state["y"] + state["b"]

    def bias_block(which):
        def step(state, x):
            if x.get("bias") is None:
                raise RuntimeError("no bias")   # no fit (Formula.mistakes)
            head_dim = x["weight"].shape[0] // num_heads
            block = slice(i, None, num_heads) if which == "strided" else slice(0, head_dim)
            return state["y"] + x["bias"][block]
        return step

    steps = [("block of rows of head i", rows(i)),
             ("product x W_i^T", lambda st, x: _with(st, y=x["x"] @ st["w"].transpose(0, 1))),
             ("bias", add_bias)]
    bias_ways = {}
    if i != 0:
        bias_ways[MESSAGES["head_projection_adds_head_0_s"]] = \
            bias_block("first")
    bias_ways[MESSAGES["head_projection_adds_strided_entries_bias"]] = \
        bias_block("strided")
    ways = {MESSAGES["head_projection_takes_strided_rows_i"]: rows("strided"),
            MESSAGES["head_projection_computes_head_dim_from"]: rows(i, size_from="x"),
            MESSAGES["head_projection_takes_columns_weight_rows"]:
            columns}
    if i != 0:   # from row i (for head 0 the same block)
        ways[MESSAGES["head_projection_takes_rows_i_i"]] = rows("from i")
    ways.update({MESSAGES["head_projection_neighbour"].format(j=j, i=i): rows(j)
                 for j in (i - 1, i + 1) if 0 <= j < num_heads})
    ways.update({MESSAGES["head_projection_other_head"].format(j=j, j_end=j + 1, i=i,
                                                             i_end=i + 1): rows(j)
                 for j in range(num_heads) if abs(j - i) > 1})

    def subtract_bias(state, x):
        if state["b"] is None:
            raise RuntimeError("no bias")   # no fit (Formula.mistakes)
        return state["y"] - state["b"]

    bias_ways[MESSAGES["head_projection_subtracts_bias_adding_x"]] = subtract_bias

    def one_entry(state, x):
        if x.get("bias") is None:
            raise RuntimeError("no bias")   # no fit (Formula.mistakes)
        return state["y"] + x["bias"][i]

    bias_ways[MESSAGES["head_projection_one_entry"].format(i=i)] = one_entry

    def from_heads_count(_v, x):
        head_dim = x["weight"].shape[0] // num_heads
        if head_dim == num_heads or i * num_heads + head_dim > x["weight"].shape[0]:
            raise RuntimeError("the same block, or none")   # no fit (Formula.mistakes)
        block = slice(i * num_heads, i * num_heads + head_dim)
        bias = x.get("bias")
        return {"w": x["weight"][block], "b": None if bias is None else bias[block]}

    if i != 0:
        ways[MESSAGES["head_projection_starts_head_i_s"]] = from_heads_count
    return Formula(steps, {"block of rows of head i": ways, "bias": bias_ways},
                   {"bias": lambda st, _x: st["y"]})


def core_formula(dims, num_heads, output=True):
    """multihead_attention_core (chapter 2): multihead_formula with identity projections,
    and the other ways of its steps that reading the three inputs and scaling by
    sqrt(head_dim) allow: keys or values split from another input. output=False: its
    weights (B, num_heads, Lq, Lk), and the ways of returning them."""
    formula = multihead_formula(dims, num_heads, output)
    project = dict(formula.steps)["projection"]
    merge = dict(formula.steps).get("merge of the heads")

    def heads_after_positions(st, _x):
        """The split without its transpose: (B, L, num_heads, head_dim), so that the
        attention's last two axes are the heads and their features (this chapter's silent
        bug); the merge then flattens them back in place."""
        return _with(st, across=True, **{n: st[n].reshape(*st[n].shape[:2], num_heads, -1)
                                         for n in "qkv"})

    def merge_in_place(st, x):
        if not st.get("across"):
            return merge(st, x)
        B, L, h, head_dim = st["o"].shape
        return _with(st, o=st["o"].reshape(B, L, h * head_dim))

    # no projections here: the first step only takes the three inputs
    formula.steps = tuple(("inputs" if name == "projection" else name,
                           merge_in_place if name == "merge of the heads" else step)
                          for name, step in formula.steps)
    formula.variants["split into heads"] = {
        **formula.variants["split into heads"],
        MESSAGES["core_leaves_heads_after_positions"]: heads_after_positions}

    def reading(which, source):
        return lambda st, x: project(st, {**x, which: x[source]})

    del formula.variants["projection"]
    # Q Q^T and K K^T: with no projections, the inputs read twice (the variants below)
    for same_input in ("product_multiplies_queries_themselves_q",
                       "product_multiplies_keys_themselves_k"):
        formula.variants["Q K^T product"].pop(MESSAGES[same_input])
    formula.variants["inputs"] = {
        MESSAGES["core_reads_query_input_for"]: reading("key", "query"),
        MESSAGES["core_reads_key_input_for"]: reading("query", "key"),
        MESSAGES["core_reads_query_input_for_2"]:
            lambda st, x: project(st, {**x, "key": x["query"], "value": x["query"]}),
        MESSAGES["core_reads_query_input_for_3"]: reading("value", "query"),
        MESSAGES["core_reads_key_input_for_2"]: reading("value", "key"),
        MESSAGES["core_swaps_key_value_inputs"]:
            lambda st, x: project(st, {**x, "key": x["value"], "value": x["key"]})}
    # the scale moved past the softmax: the weights divided, the scores left as they are
    formula.together[MESSAGES["core_scale_moved_after_softmax"]] = {
        "scale": lambda st, _x: st,
        "softmax": lambda st, _x: _with(st, w=torch.softmax(st["s"], dim=-1)
                                        / math.sqrt(st["q"].shape[-1]))}
    if not output:
        formula.variants["weights"] = {
            MESSAGES["core_returns_transposed_b_num"]:
                lambda st, _x: st["w"].transpose(-2, -1)}
    return formula


FORMULAS["split heads"] = split_formula
FORMULAS["merge heads"] = merge_formula
FORMULAS["fuse head weights"] = fuse_formula
FORMULAS["head projection"] = head_projection_formula
FORMULAS["multi-head attention core"] = core_formula
FORMULAS["multi-head core weights"] = (
    lambda dims, num_heads: core_formula(dims, num_heads, output=False))


# ==== chapter 4: masks ====================================================================

class _UpToTwoSteps(Formula):
    """A Formula whose mistakes (each change, and the pairs of Formula.pairs()) that agree
    on the inputs are one mistake, named by all its sentences, and a pair that agrees with
    a single change is that change: for an exercise whose steps are often got wrong
    together (filling the masked scores and zeroing the masked weights)."""

    def mistakes(self, inputs):
        tried = [(sentence, {name: function}) for sentence, name, function in self.changes()]
        pairs = self.pairs()
        tried += pairs
        paired = {sentence for sentence, _ in pairs}
        found = []   # [[sentences], output, its sum (a cheap first test of equality)]
        for sentence, replace in tried:
            try:
                output = self.run(inputs, replace)
            except (RuntimeError, KeyError):
                continue
            total = _total(output)
            same = next((entry for entry in found
                         if entry[1].shape == output.shape and _near(entry[2], total)
                         and torch.allclose(entry[1], output, rtol=1e-9, atol=1e-12,
                                            equal_nan=True)), None)
            if same is None:
                found.append([[sentence], output, total])
            elif len(replace) == 1 or all(s in paired for s in same[0]):
                same[0].append(sentence)   # the same values: either description fits
        return {MESSAGES["either"].join(sentences): output for sentences, output, _ in found}


def _mask_products(fill):
    """The fill step of masked_softmax_formula: `fill(scores, masked)`, where masked (bool,
    broadcastable) is True at the keys that may not be attended (None: no mask)."""
    def step(st, _x):
        return st if st["masked"] is None else _with(st, s=fill(st["s"], st["masked"]))
    return step


def _batch_softmax(axis):
    """masked_softmax_formula's softmax step over a leading (batch) axis of the scores,
    where they have one there (else no fit: the axis would be Lq or Lk)."""
    def step(st, _x):
        if st["s"].dim() < axis + 3:
            raise RuntimeError(f"no batch axis {axis}")   # no fit (Formula.mistakes)
        return _with(st, w=torch.softmax(st["s"], dim=axis))
    return step


def masked_softmax_formula(dims):
    """Chapter 4's masked softmax, the course's rule: the masked keys are where the mask is
    False (True = may attend), their scores are filled with torch.finfo(dtype).min, a
    softmax runs over the keys (the last axis), and the masked weights are set to 0 (which
    zeroes a row with no allowed key). Inputs {"scores" (..., Lq, Lk), "mask" (bool,
    broadcastable) or None}; output (..., Lq, Lk)."""
    def lowest(s):
        return torch.finfo(s.dtype).min

    def zero(st, _x):
        return st["w"] if st["masked"] is None else st["w"].masked_fill(st["masked"], 0.0)

    def softmax(dim):
        return lambda st, _x: _with(st, w=torch.softmax(st["s"], dim=dim))

    steps = [("masked keys", lambda _v, x: {
                 "s": x["scores"], "masked": None if x.get("mask") is None else ~x["mask"]}),
             ("fill", _mask_products(lambda s, masked: s.masked_fill(masked, lowest(s)))),
             ("softmax", softmax(-1)),
             ("zeroing of the masked weights", zero)]
    variants = {
        "masked keys": {
            MESSAGES["masked_softmax_takes_keys_where_mask"]:
                lambda _v, x: {"s": x["scores"], "masked": x.get("mask")}},
        "fill": {
            MESSAGES["masked_softmax_fills_masked_scores_fixed"]:
                _mask_products(lambda s, masked: s.masked_fill(masked, -1e4)),
            MESSAGES["masked_softmax_fills_masked_scores_0"]: _mask_products(
                lambda s, masked: s.masked_fill(masked, 0.0)),
            MESSAGES["masked_softmax_adds_mask_scores_true"]:
                _mask_products(lambda s, masked: s + ~masked),
            MESSAGES["masked_softmax_fills_scores_keys_may"]:
                _mask_products(lambda s, masked: s.masked_fill(~masked, lowest(s)))},
        "zeroing of the masked weights": {
            MESSAGES["masked_softmax_zeroes_weights_keys_may"]:
                lambda st, _x: st["w"] if st["masked"] is None
                else st["w"].masked_fill(~st["masked"], 0.0)},
        "softmax": {MESSAGES["multihead_runs_over_queries_dim"]: softmax(-2),
                    **{MESSAGES["softmax_batch_axis"].format(axis=axis):
                       _batch_softmax(axis) for axis in (0, 1)},
                    MESSAGES["masked_softmax_log_softmax_log_weights"]:
                        lambda st, _x: _with(st, w=torch.log_softmax(st["s"], dim=-1))},
    }
    # the softmax replaced by another normalisation (chapter 1's, on the filled scores)
    variants["softmax"].update({
        sentence: (lambda st, x, other=other: _with(st, w=other(st["s"], x)))
        for sentence, other in _other_normalisations().items()})
    skips = {"fill": None, "zeroing of the masked weights": lambda st, _x: st["w"]}
    return _UpToTwoSteps(steps, variants, skips)


FORMULAS["masked softmax"] = masked_softmax_formula


def masked_attention_formula(dims, d_k, output=True):
    """Chapter 4's masked attention: chapter 1's formula (attention_formula), whose mask
    step may also be done by multiplying or adding the mask, and whose scale may be
    sqrt(d_k) rounded to float32 (common.float32_sqrt: visible in a float64 run), or done
    after the softmax; the weights alone when not `output`."""
    formula = attention_formula(dims, d_k, output=output)
    # the scale moved past the softmax: the weights (and so the output) divided by sqrt(d_k)
    formula.together[MESSAGES["masked_attention_scale_applied_after_softmax"]] = {
        "scale": lambda s, _x: s,
        "softmax": lambda s, x: _softmax_over(-1)(s, x) / math.sqrt(d_k)}
    formula.variants["mask"] = {
        **formula.variants["mask"],
        MESSAGES["masked_attention_multiplies_scores_mask_masked"]:
            lambda s, x: s if x.get("mask") is None else s * x["mask"],
        MESSAGES["masked_softmax_adds_mask_scores_true"]:
            lambda s, x: s if x.get("mask") is None else s + x["mask"],
        MESSAGES["masked_attention_fills_masked_scores_finite"]:
            lambda s, x: s if x.get("mask") is None
            else s.masked_fill(~x["mask"], torch.finfo(s.dtype).min)}
    formula.variants["softmax"] = {
        **formula.variants["softmax"],
        MESSAGES["masked_attention_multiplies_weights_mask_afterwards"]:
            lambda s, x: torch.softmax(s, dim=-1) if x.get("mask") is None
            else torch.softmax(s, dim=-1) * x["mask"]}
    # (sqrt(d_k) rounded to float32 is among attention_formula's scale variants already)
    return formula


FORMULAS["masked attention"] = masked_attention_formula
FORMULAS["masked attention weights"] = (
    lambda dims, d_k: masked_attention_formula(dims, d_k, output=False))


def causal_mask_formula(dims):
    """Chapter 4's causal_mask(q_len, k_len): a (q_len, k_len) bool mask, lower triangular
    with the diagonal, aligned at the top-left corner (query i may attend to keys 0..i).
    Inputs {"q_len", "k_len"} (ints); its sizes are a step, so that a mask of another size
    is named by what it is (the triangle's own mistakes, a diagonal off by k or the upper
    triangle, are the mask families' of diagnose.py)."""
    q_len = dims.get("q_len")
    k_len = dims.get("k_len") or q_len
    shift = ("" if q_len is None else
             MESSAGES["causal_shift"].format(diagonal=k_len - q_len))
    steps = [("size", lambda _v, x: (x["q_len"], x["k_len"])),
             ("triangle", lambda size, _x: torch.ones(size, dtype=torch.bool).tril())]
    variants = {
        "size": {MESSAGES["causal_mask_ignores_k_len_parameter"]:
                 lambda _v, x: (x["q_len"], x["q_len"]),
                 MESSAGES["causal_mask_exchanges_q_len_k"]:
                 lambda _v, x: (x["k_len"], x["q_len"])},
        "triangle": {MESSAGES["causal_bottom_right"].format(shift=shift):
                     lambda size, _x: torch.ones(size, dtype=torch.bool).tril(
                         diagonal=size[1] - size[0])}}
    return Formula(steps, variants)


FORMULAS["causal mask"] = causal_mask_formula


# ==== chapter 5: why heads diversify ======================================================

def relation_formula(dims, relation):
    """relation_scores' prev (relation "prev") or first ("first"), (num_heads,): the weight of
    query i on key i-1 (prev) or on key 0 (first), averaged over the batch and over the query
    positions i >= 2. Inputs {"weights": (B, num_heads, L, L)}."""
    def rows(start, stop=0):
        """The query positions start .. L - 1 + stop (none: no fit, see Formula.mistakes)."""
        def step(_v, x):
            positions = torch.arange(start, x["weights"].shape[-1] + stop)
            if not len(positions):
                raise RuntimeError("no query position left")
            return positions
        return step

    def pick(key, query=lambda i: i):
        """The entries weights[..., query(i), key(i)] for the rows i where both exist:
        (B, num_heads, rows)."""
        def step(i, x):
            w = x["weights"]
            q, k = query(i), key(i) + 0 * i
            inside = (q >= 0) & (q < w.shape[-2]) & (k >= 0) & (k < w.shape[-1])
            return w[:, :, q[inside], k[inside]]
        return step

    right, other = ((lambda i: i - 1), (lambda i: 0 * i))
    right_key, other_name = MESSAGES["relation_key_previous"], "first"
    if relation == "first":
        right, other = other, right
        right_key, other_name = MESSAGES["relation_key_first"], "prev"
    other_key = MESSAGES["relation_key_first" if relation == "prev" else "relation_key_previous"]
    keys = {MESSAGES["relation_swapped"].format(other_key=other_key, right_key=right_key,
                                                other_name=other_name): pick(other)}
    if relation == "first":  # (before the entry above the diagonal: both read the mask's 0)
        keys = {MESSAGES["relation_reads_row_0_weights"]: pick(lambda i: i, query=lambda i: 0 * i),
                **keys}
    keys.update({
        MESSAGES["relation_diagonal"].format(right_key=right_key): pick(lambda i: i),
        MESSAGES["relation_above"].format(right_key=right_key):
            pick(lambda i: i, query=lambda i: i - 1)})
    # an index off by one (the key one position further from the query)
    if relation == "first":
        keys[MESSAGES["relation_reads_key_1_key"]] = pick(
            lambda i: 0 * i + 1)
    else:
        keys[MESSAGES["relation_reads_key_i_2"]] = pick(lambda i: i - 2)
    steps = [("query positions", rows(2)),
             ("key", pick(right)),
             ("average", lambda picked, _x: picked.mean((0, 2)))]
    variants = {
        "query positions": {MESSAGES["relation_starts_i_1_i"]:
                            rows(1),
                            MESSAGES["relation_takes_every_query_position"]: rows(0),
                            MESSAGES["relation_starts_i_3_i"]: rows(3),
                            MESSAGES["relation_stops_before_last_query"]: rows(2, stop=-1)},
        "key": keys,
        "average": {MESSAGES["relation_sums_over_query_positions"]:
                    lambda picked, _x: picked.sum(2).mean(0),
                    MESSAGES["relation_sums_over_batch_averaging"]:
                    lambda picked, _x: picked.sum(0).mean(-1),
                    MESSAGES["relation_takes_largest_weight_over"]:
                    lambda picked, _x: picked.amax(2).mean(0),
                    MESSAGES["relation_averages_over_query_positions"]:
                        lambda picked, _x: picked[0].mean(-1)}}
    return Formula(steps, variants)


FORMULAS["relation score"] = relation_formula


def similarity_formula(dims):
    """head_similarity: for each example, each head's (Lq, Lk) map flattened, normalised to
    length 1, the dot products between heads; averaged over the batch: (num_heads,
    num_heads). Inputs {"weights": (B, num_heads, Lq, Lk)}."""
    normalize = torch.nn.functional.normalize
    steps = [("flatten", lambda _v, x: x["weights"].flatten(2)),            # (B, h, Lq*Lk)
             ("normalise", lambda maps, _x: normalize(maps, dim=-1)),
             ("dot products", lambda unit, _x: unit @ unit.transpose(1, 2)),  # (B, h, h)
             ("average over the batch", lambda s, _x: s.mean(0))]
    variants = {
        "flatten": {
            MESSAGES["similarity_compares_maps_one_query"]:
                lambda _v, x: x["weights"].transpose(1, 2).flatten(0, 1),   # (B*Lq, h, Lk)
            MESSAGES["similarity_averages_maps_over_batch"]:
                lambda _v, x: x["weights"].mean(0).flatten(1)[None],        # (1, h, Lq*Lk)
            MESSAGES["similarity_flattens_batch_into_head"]:
                lambda _v, x: x["weights"].transpose(0, 1).flatten(1)[None],  # (1, h, B*Lq*Lk)
            MESSAGES["similarity_merges_batch_axis_into"]:
                lambda _v, x: x["weights"].flatten(2).flatten(0, 1)[None]},  # (1, B*h, Lq*Lk)
        "normalise": {
            MESSAGES["similarity_left_out_dot_products"]:
                lambda maps, _x: maps,
            MESSAGES["similarity_runs_along_heads_axis"]:
                lambda maps, _x: normalize(maps, dim=1),
            MESSAGES["similarity_normalises_query_s_row"]: lambda maps, x: normalize(
                maps.unflatten(-1, x["weights"].shape[-2:]), dim=-1).flatten(-2),
            MESSAGES["similarity_runs_along_batch_axis"]:
                lambda maps, _x: normalize(maps, dim=0),
            MESSAGES["similarity_divides_map_sum_entries"]:
                lambda maps, _x: normalize(maps, p=1, dim=-1),
            MESSAGES["similarity_subtracts_map_s_mean"]:
                lambda maps, _x: normalize(maps - maps.mean(-1, keepdim=True), dim=-1),
            MESSAGES["similarity_divides_sqrt_lq_lk"]:
                lambda maps, _x: maps / math.sqrt(maps.shape[-1]),
            MESSAGES["similarity_divides_one_norm_whole"]:
                lambda maps, _x: maps / maps.norm()},
        "average over the batch": {MESSAGES["similarity_batch_summed"]: lambda s, _x: s.sum(0),
                                   MESSAGES["similarity_takes_first_example_averaging"]:
                                       lambda s, _x: s[0],
                                   MESSAGES["similarity_takes_last_example_averaging"]:
                                       lambda s, _x: s[-1],
                                   MESSAGES["similarity_averages_over_all_axes"]:
                                   lambda s, _x: s.mean(),
                                   MESSAGES["similarity_averages_over_heads_axis"]:
                                   lambda s, _x: s.mean(1)}}
    # the per-example matrices returned, (B, num_heads, num_heads): no average at all
    return Formula(steps, variants, optional=["average over the batch"])


FORMULAS["head similarity"] = similarity_formula


def ablation_formula(dims, num_heads, L, vocab_size, d_model):
    """ablation_importance: for each head k, the loss with gates all ones but gates[k] = 0,
    minus the loss with no mask; loss = mean cross-entropy of prev + that of first. Inputs:
    the lab model's parameters by name (checks.diversity.GatedModel) and "tokens",
    "prev_target", "first_target" (N, L) long."""
    from .diversity import GatedModel  # the lab model the check builds (grader-only here)
    cross_entropy = torch.nn.functional.cross_entropy
    targets = ("tokens", "prev_target", "first_target")
    h = num_heads

    def model(x):
        params = {k: v for k, v in x.items() if k not in targets}
        return GatedModel(vocab_size, L, d_model, h, params=params).double()

    def loss(parts=("prev", "first"), reduction="mean", combine=sum, of_logits=cross_entropy):
        def of(x, gates):
            with torch.no_grad():
                logits_prev, logits_first, _ = model(x)(x["tokens"], head_mask=gates)
            logits = {"prev": logits_prev, "first": logits_first}
            return combine([of_logits(logits[p].flatten(0, 1), x[f"{p}_target"].flatten(),
                                      reduction=reduction)
                            for p in parts])
        return lambda gates, x: {
            "masked": torch.stack([of(x, g) for g in gates]), "base": of(x, None),
            "off": of(x, torch.zeros(h, dtype=torch.float64))}

    def gates(off_only=True, cumulative=False, shift=0):
        def step(_v, _x):
            eye = torch.eye(h, dtype=torch.float64).roll(-shift, 1)   # row k: head k - shift
            if cumulative:   # one gates tensor, never reset: heads 0 .. k off at step k
                return list(1 - eye.cumsum(0))
            return list(1 - eye) if off_only else list(eye)
        return step

    def example_gates(_v, x):
        """(N, num_heads) gates with row k at 0: every head of example k off, for each k."""
        N = x["tokens"].shape[0]
        if N < h:
            raise RuntimeError("fewer examples than heads")
        return [torch.ones(N, h, dtype=torch.float64).index_fill(0, torch.tensor([k]), 0.0)
                for k in range(h)]

    def gradient_score(_st, x):
        """E_x |dL(x)/d gate_k| at gates = 1: each example's own gates (N, h)."""
        tokens = x["tokens"]
        gate = torch.ones(tokens.shape[0], h, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            logits_prev, logits_first, _ = model(x)(tokens, head_mask=gate)
            per_example = sum(  # the mean over each example's positions with a target
                cross_entropy(logits.transpose(1, 2), x[f"{p}_target"], reduction="none").sum(1)
                / (x[f"{p}_target"] != -100).sum(1)
                for p, logits in (("prev", logits_prev), ("first", logits_first)))
            per_example.sum().backward()
        return gate.grad.abs().mean(0)

    steps = [("gates", gates()),
             ("loss", loss()),
             ("baseline subtraction", lambda st, _x: st["masked"] - st["base"])]
    variants = {
        "gates": {MESSAGES["ablation_switches_off_every_head"]: gates(off_only=False),
                  MESSAGES["ablation_switches_off_heads_0"]:
                  gates(cumulative=True),
                  MESSAGES["ablation_switches_off_head_k"]: gates(shift=1),
                  MESSAGES["ablation_switches_off_every_head_2"]: example_gates},
        "loss": {MESSAGES["ablation_uses_only_loss_prev"]:
                 loss(parts=("prev",)),
                 MESSAGES["ablation_uses_only_loss_first"]:
                 loss(parts=("first",)),
                 MESSAGES["ablation_sums_cross_entropy_over"]: loss(reduction="sum"),
                 MESSAGES["ablation_averages_two_losses_loss"]:
                 loss(combine=lambda parts: sum(parts) / 2),
                 MESSAGES["ablation_applies_f_nll_loss"]:
                 loss(of_logits=torch.nn.functional.nll_loss)},
        "baseline subtraction": {MESSAGES["ablation_wrong_way_round_loss"]:
                                 lambda st, _x: st["base"] - st["masked"],
                                 MESSAGES["ablation_divides_loss_no_mask"]:
                                 lambda st, _x: (st["masked"] - st["base"]) / st["base"],
                                 MESSAGES["ablation_takes_absolute_value_difference"]:
                                 lambda st, _x: (st["masked"] - st["base"]).abs(),
                                 MESSAGES["ablation_subtracts_loss_every_head"]:
                                 lambda st, _x: st["masked"] - st["off"],
                                 MESSAGES["ablation_replaced_gradient_score_dl"]: gradient_score}}
    return Formula(steps, variants, {"baseline subtraction": lambda st, _x: st["masked"]})


FORMULAS["ablation importance"] = ablation_formula


def _head_blocks(h, hd, layout):
    """A function (W) -> a view of W with its heads on axis 0: "rows" (h*hd, ...) as
    (h, hd, ...); "columns" (D, h*hd) as (h, D, hd); "strided" rows i, i + h, ... as head i."""
    if layout == "rows":
        return lambda W: W.unflatten(0, (h, hd))
    if layout == "columns":
        return lambda W: W.unflatten(1, (h, hd)).movedim(1, 0)
    return lambda W: W.unflatten(0, (hd, h)).movedim(1, 0)


# (the layouts in words: MESSAGES["layout_words"]; why the right one is right, said after a
# wrong one: MESSAGES["layout_why"])


def _other_layouts(W, layout, make_step):
    """{description: step} of the two other layouts than `layout` for W's head blocks."""
    others = ("rows", "columns", "strided") if W.dim() == 2 else ("rows", "strided")
    words = MESSAGES["layout_words"]
    return {MESSAGES["layout_other"].format(other=words[other], right=words[layout],
                                            why=MESSAGES["layout_why"].get(layout, "")):
            make_step(other)
            for other in others if other != layout}


def _averaged(W, split):
    """W with every head's block (split(W): a view with the heads on axis 0) replaced by
    the mean of all the heads' blocks."""
    W = W.clone()
    blocks = split(W)
    blocks[:] = blocks.mean(0, keepdim=True).clone()
    return W


def head_copy_formula(dims, num_heads, head_dim, layout, ndim=2, key=None):
    """make_heads_identical for one parameter W (inputs {"W"}, named `key`): head 0's block
    copied into every head i = 1 .. num_heads - 1; the blocks are rows of q_proj, k_proj,
    v_proj and of their biases (layout "rows") and columns of out_proj.weight ("columns")."""
    h, hd = num_heads, head_dim
    key = key or MESSAGES["the_parameter"]

    def copied(split, heads):
        def step(_v, x):
            W = x["W"].clone()
            blocks = split(W)                     # a view: writes reach W
            for i in heads:
                blocks[i] = blocks[0]
            return W
        return step

    def layout_step(other):
        return copied(_head_blocks(h, hd, other), range(1, h))

    def copied_from(source):
        def step(_v, x):
            W = x["W"].clone()
            blocks = _head_blocks(h, hd, layout)(W)
            blocks[:] = blocks[source].clone()
            return W
        return step

    def into_first(source):
        """Head `source`'s block written into head 0 (a loop whose assignment is reversed
        leaves the last head's there)."""
        def step(_v, x):
            W = x["W"].clone()
            blocks = _head_blocks(h, hd, layout)(W)
            blocks[0] = blocks[source].clone()
            return W
        return step

    steps = [("copy", layout_step(layout))]
    variants = {"copy": {
        MESSAGES["copy_left_out"].format(key=key): lambda _v, x: x["W"],
        **_other_layouts(torch.empty((1,) * ndim), layout, layout_step),
        MESSAGES["copy_stops_early"].format(last=h - 1):
            copied(_head_blocks(h, hd, layout), range(1, h - 1)),
        MESSAGES["head_copy_copies_average_all_heads"]:
            lambda _v, x: _averaged(x["W"], _head_blocks(h, hd, layout)),
        **{MESSAGES["copy_from_head"].format(j=j):
           copied_from(j) for j in range(1, h)},
        **{MESSAGES["copy_into_first"].format(j=j): into_first(j)
           for j in sorted({1, h - 1}) if j > 0}}}
    if h > 3:   # (with 3 heads, the same as stopping before the last head)
        variants["copy"][MESSAGES["copy_only_first"].format(last=h - 1)] = copied(
            _head_blocks(h, hd, layout), [1])
    return Formula(steps, variants)


FORMULAS["head copy"] = head_copy_formula


def head_pruning_formula(dims, num_heads, head_dim, layout, remove, ndim=2):
    """prune_heads for one parameter W (inputs {"W"}): the blocks of the heads not in
    `remove`, in their original order (rows of q_proj, k_proj, v_proj and their biases:
    layout "rows"; columns of out_proj.weight: "columns")."""
    h, hd = num_heads, head_dim
    keep = [k for k in range(h) if k not in remove]

    def kept(heads, layout_=layout):
        def step(_v, x):
            blocks = _head_blocks(h, hd, layout_)(x["W"])[heads]   # (kept, ...)
            axis = 1 if layout_ == "columns" else 0
            return blocks.movedim(0, axis).flatten(axis, axis + 1)
        return step

    steps = [("selection", kept(keep))]
    variants = {"selection": {
        MESSAGES["head_pruning_keeps_first_heads_0"]:
            kept(list(range(len(keep)))),
        MESSAGES["head_pruning_keeps_heads_heads_remove"]: kept(sorted(remove)),
        **{description: step for description, step in _other_layouts(
            torch.empty((1,) * ndim), layout, lambda other: kept(keep, other)).items()}}}
    return Formula(steps, variants)


FORMULAS["head pruning"] = head_pruning_formula


def out_bias_formula(dims, num_heads, head_dim, kept=None):
    """out_proj.bias in make_heads_identical and prune_heads (inputs {"W"}, (d_model,)): it
    belongs to no head, so it stays as it is. kept: the number of heads prune_heads keeps
    (None: make_heads_identical, where d_model = num_heads * head_dim)."""
    h, hd = num_heads, head_dim
    # (make_heads_identical says why after the family's sentence: its out_bias_changed;
    # prune_heads's sentence says it itself, MESSAGES["out_bias_scaled"])

    def as_head_blocks(_v, x):
        W = x["W"].clone()
        if W.numel() != h * hd:
            raise RuntimeError("no head blocks")
        W.view(h, hd)[1:] = W.view(h, hd)[:1]
        return W

    variants = {"out_proj.bias": {
        MESSAGES["out_bias_copies_head_0_s"]: as_head_blocks}}
    if kept is not None:
        variants["out_proj.bias"][
            MESSAGES["out_bias_scaled"].format(kept=kept, heads=h)] = \
            lambda _v, x: x["W"] * kept / h
    return Formula([("out_proj.bias", lambda _v, x: x["W"])], variants)


FORMULAS["out bias"] = out_bias_formula



# ==== chapters 6-7: shared keys and values, the KV cache, positions ========================

def grouped_query_formula(dims, num_heads, num_kv_heads):
    """Multi-head attention whose keys and values have num_kv_heads heads, each repeated for
    num_heads // num_kv_heads query heads (multihead_formula)."""
    return multihead_formula(dims, num_heads, num_kv_heads=num_kv_heads)


FORMULAS["grouped-query attention"] = grouped_query_formula


def repeat_kv_formula(dims, num_heads):
    """repeat_kv(kv, num_heads): kv (B, num_kv_heads, L, head_dim) -> (B, num_heads, L,
    head_dim), key/value head j repeated for the G = num_heads // num_kv_heads consecutive
    query heads j*G .. j*G + G - 1. Inputs: "kv". (The repeat tiled, heads in the other
    order, is named by diagnose.other_layout.)"""
    def repeat(times=None, dim=1):
        def step(_v, x):
            G = num_heads // x["kv"].shape[1]
            return x["kv"].repeat_interleave(G if times is None else times, dim=dim)
        return step

    # left out: each key/value head once (G taken as 1, e.g. num_kv_heads read off another axis)
    return Formula([("repeat", repeat())], optional={"repeat": lambda _v, x: x["kv"]},
                   variants={"repeat": {
        MESSAGES["repeat_kv_repeats_key_value_head"]:
            repeat(times=num_heads),
        MESSAGES["repeat_kv_repeats_along_l_axis"]:
            repeat(dim=2),
        MESSAGES["repeat_kv_ratio_inverted"]:
            lambda v, x: repeat(times=x["kv"].shape[1] // num_heads)(v, x)}})


FORMULAS["repeat kv"] = repeat_kv_formula


def attend_heads_formula(dims, num_heads, num_kv_heads):
    """attend_heads: grouped_query_formula's steps from the repeat of the key/value heads
    on, on heads already projected and split. Inputs "q" (B, num_heads, L, head_dim), "k",
    "v" (B, num_kv_heads, T, head_dim), "mask" (or None), "o_w", "o_b"."""
    full = grouped_query_formula(dims, num_heads, num_kv_heads)
    before = ("projection", "split into heads")   # attend_heads is handed their results
    steps = [("heads", lambda _v, x: {n: x[n] for n in "qkv"})]
    steps += [step for step in full.steps if step[0] not in before]
    return Formula(steps, {name: ways for name, ways in full.variants.items()
                           if name not in before},
                   {name: skip for name, skip in full.optional.items() if name not in before},
                   {sentence: replace for sentence, replace in full.together.items()
                    if not set(replace) & set(before)})


FORMULAS["attend heads"] = attend_heads_formula


def project_heads_formula(dims, num_heads, num_kv_heads, role):
    """project_heads' `role` output ("q", "k" or "v"): x (B, L, d_model) projected by that
    role's nn.Linear (inputs "x", "q_w", "q_b", "k_w", ..., the biases None where there are
    none), then split into its heads, num_heads for q and num_kv_heads for k and v:
    (B, heads, L, head_dim)."""
    heads = num_heads if role == "q" else num_kv_heads

    def project(name, bias=True):
        def step(_value, x):
            if x[f"{name}_w"].shape != x[f"{role}_w"].shape:
                raise RuntimeError("another width")   # no fit: a wrong shape says more
            return _linear(x["x"], x, name, bias)
        return step

    def split(how):
        return lambda t, _x: _split_heads(t, heads, how)

    steps = [("projection", project(role)), ("split into heads", split("transpose"))]
    variants = {
        "projection": {MESSAGES["project_other_weights"].format(used=other, meant=role):
                       project(other) for other in "qkv" if other != role},
        "split into heads": {MESSAGES["multihead_reshapes_without_transpose"]: split("view"),
                             MESSAGES["multihead_interleaves_heads_features"]:
                                 split("interleaved")}}
    variants["projection"][MESSAGES["project_no_bias"].format(name=role)] = project(role, False)
    return Formula(steps, variants)


FORMULAS["project heads"] = project_heads_formula


ROTARY_BASE = 10000.0  # rotary's default base


def _frequencies(size, width, base, exponent=2.0, first=0, unbracketed=False, floor=False):
    """The frequencies (size,) of pairs first .. first + size - 1 of `width` features:
    base ** (-exponent * i / width); unbracketed: base ** -exponent * i / width, the
    exponent's parentheses left out (** binds before * and /); floor: the exponent divided
    with // (rounded down)."""
    pair = torch.arange(first, first + size, dtype=torch.float64)
    if unbracketed:
        return base ** -exponent * pair / width
    if floor:
        return base ** torch.div(-exponent * pair, width, rounding_mode="floor")
    return base ** (-exponent * pair / width)


def _rotate(x, positions, base=ROTARY_BASE, pairs="halves", written="halves", exponent=2.0,
            sign=1.0, exchanged=False, first=0, unbracketed=False, reads="ab", floor=False):
    """Rotary positions on x (..., L, hd) at `positions` (L,): pair i of each row turns by
    position * base ** (-exponent * i / hd). pairs: which features form pair i, "halves"
    (i, i + hd/2) or "neighbours" (2i, 2i + 1); written: where the turned pair goes back;
    first, unbracketed: _frequencies'; reads: the halves (a, b) that the sin products of
    the turned pair's first and second entry read ("ab": b sin in the first, a sin in the
    second, as the rotation has it)."""
    hd = x.shape[-1]
    half = hd // 2
    angles = positions.double()[:, None] * _frequencies(half, hd, base, exponent, first,
                                                        unbracketed, floor)   # (L, hd/2)
    cos, sin = angles.cos(), sign * angles.sin()
    if exchanged:  # cos where sin belongs and sin where cos belongs
        cos, sin = sin, cos
    a, b = ((x[..., :half], x[..., half:]) if pairs == "halves"
            else (x[..., 0::2], x[..., 1::2]))                                  # (..., L, hd/2)
    halves = {"a": a, "b": b}
    turned = (a * cos - halves[reads[1]] * sin, halves[reads[0]] * sin + b * cos)
    if written == "halves":
        return torch.cat(turned, -1)
    return torch.stack(turned, -1).flatten(-2)


def rotary_formula(dims, base=ROTARY_BASE):
    """apply_rotary(x, positions, base): the pairs (i, i + head_dim // 2) of x (..., L, hd)
    turned by position * base ** (-2 i / head_dim). Inputs "x", "positions" (L,)."""
    def rotate(**how):
        return lambda _v, x: _rotate(x["x"], x["positions"], base, **how)

    def rotate_at_0_to_L(_v, x):
        return _rotate(x["x"], torch.arange(x["x"].shape[-2]), base)

    steps = [("rotation", rotate())]
    variants = {"rotation": {
        MESSAGES["rotary_pairs_neighbouring_features_2i"]:
            rotate(pairs="neighbours", written="neighbours"),
        MESSAGES["rotary_reads_pairs_halves_but"]:
            rotate(written="neighbours"),
        MESSAGES["rotary_reads_neighbouring_features_2i"]:
            rotate(pairs="neighbours"),
        MESSAGES["rotary_turns_pair_angle_other"]: rotate(sign=-1.0),
        MESSAGES["rotary_uses_frequencies_base_i"]: rotate(exponent=1.0),
        MESSAGES["rotary_ignores_positions_given_uses"]: rotate_at_0_to_L,
        MESSAGES["rotary_turns_position_p_angle"]:
            lambda _v, x: _rotate(x["x"], x["positions"] + 1, base),
        MESSAGES["rotary_exchanges_cos_sin_cos"]: rotate(exchanged=True)}}
    if base != ROTARY_BASE:
        variants["rotation"][MESSAGES["ignores_base"].format(base=base, default=ROTARY_BASE)] = (
            lambda _v, x: _rotate(x["x"], x["positions"], ROTARY_BASE))
    variants["rotation"].update({
        MESSAGES["rotary_uses_frequencies_base_4"]: rotate(exponent=4.0),
        MESSAGES["rotary_uses_frequencies_base_2"]:
            rotate(exponent=-2.0),
        MESSAGES["rotary_counts_pairs_i_from"]: rotate(first=1),
        MESSAGES["rotary_computes_base_2_i"]: rotate(unbracketed=True),
        MESSAGES["rotary_reads_x2_sin_second"]: rotate(reads="bb"),
        MESSAGES["rotary_reads_x1_sin_first"]: rotate(reads="aa"),
        MESSAGES["exponent_floor_division"].format(width="head_dim"): rotate(floor=True)})
    return Formula(steps, variants)


FORMULAS["rotary"] = rotary_formula


def cached_attention_formula(dims, num_heads, num_kv_heads, rotary=False, base=ROTARY_BASE):
    """One call of cached_attention (rotary_cached_attention with `rotary`): the queries of
    the last L_new positions of x attend, under the causal mask aligned at the bottom-right
    corner, over the cached keys and values of the first `start` positions and their own.
    Inputs: "x" (B, start + L_new, d_model), "start" (an int: what the cache holds before
    the call, computed right), the weights "q_w" ... "o_b" (multihead_formula)."""
    h, g = num_heads, num_kv_heads

    def project(_value, x):
        return {n: _split_heads(_linear(x["x"], x, n), heads)
                for n, heads in (("q", h), ("k", g), ("v", g))}

    def positions(x, restart=False, after=False):
        T, start = x["x"].shape[1], x["start"]
        new = (torch.arange(T - start) if restart else torch.arange(T, 2 * T - start)
               if after else torch.arange(start, T))
        return torch.cat([torch.arange(start), new])

    def rotate(names="qk", restart=False, turn=base, after=False):
        def step(st, x):
            at = positions(x, restart, after)
            return _with(st, **{n: _rotate(st[n], at, turn) for n in names})
        return step

    def new_queries(st, x):
        return _with(st, q=st["q"][:, :, x["start"]:])

    def keys_only_new(st, x):
        return _with(new_queries(st, x), k=st["k"][:, :, x["start"]:],
                     v=st["v"][:, :, x["start"]:])

    def keys_cached_before(st, x):
        if x["start"] == 0:
            _no_fit("nothing cached before the prefill")
        return _with(new_queries(st, x), k=st["k"][:, :, :x["start"]],
                     v=st["v"][:, :, :x["start"]])

    def rotate_cached_again(st, x):
        st = new_queries(st, x)
        return _with(st, k=_rotate(st["k"], torch.arange(st["k"].shape[-2]), base))

    def rotate_after_append(st, x):
        # the new keys appended unrotated, then the whole cache (T keys) turned by the new
        # positions: broadcast over the T keys where the call brings one new position
        T, start = x["x"].shape[1], x["start"]
        if start == 0 or T - start != 1:
            _no_fit("the new positions broadcast over the cache only for one new position")
        return _with(st, q=_rotate(st["q"], positions(x), base),
                     k=_rotate(st["k"], torch.full((T,), start), base))

    def repeat(tiled=False):
        if tiled:
            return lambda st, _x: _with(st, **{n: st[n].repeat(1, h // g, 1, 1) for n in "kv"})
        return lambda st, _x: _with(st, **{n: st[n].repeat_interleave(h // g, dim=1)
                                           for n in "kv"})

    def mask(diagonal, complement=False):
        def step(st, _x):
            n, T = st["s"].shape[-2:]
            allowed = torch.ones(n, T, dtype=torch.bool).tril(diagonal(n, T))
            return _with(st, s=st["s"].masked_fill(allowed if complement else ~allowed,
                                                   float("-inf")))
        return step

    steps = [("projection", project)]
    if rotary:
        steps.append(("rotary", rotate()))
    steps += [("cache", new_queries),
              ("repeat of the key/value heads", repeat()),
              ("Q K^T product", lambda st, _x: _with(st, s=st["q"] @ st["k"].transpose(-2, -1))),
              ("scale", lambda st, _x: _with(st, s=st["s"] / math.sqrt(st["q"].shape[-1]))),
              ("mask", mask(lambda n, T: T - n)),
              ("softmax", lambda st, _x: _with(st, w=torch.nan_to_num(
                  torch.softmax(st["s"], dim=-1), nan=0.0))),
              ("weighted sum", lambda st, _x: _with(st, o=st["w"] @ st["v"])),
              ("merge of the heads", lambda st, _x: _merge_heads(st["o"])),
              ("output projection", lambda o, x: _linear(o, x, "o"))]
    variants = {
        "cache": {MESSAGES["cached_attention_attends_over_call_s"]:
                  keys_only_new,
                  MESSAGES["cached_attention_attends_over_keys_values"]: keys_cached_before},
        "repeat of the key/value heads": {
            MESSAGES["multihead_tiles_key_value_heads"]: repeat(tiled=True)},
        "mask": {MESSAGES["cached_attention_aligns_causal_mask_top"]: mask(lambda n, T: 0),
                 MESSAGES["cached_attention_flips_sign_causal_mask"]: mask(lambda n, T: n - T),
                 MESSAGES["mask_complement"]: mask(lambda n, T: T - n, complement=True)}}
    optional = {"mask": None}
    together = {_complement_nan(): {
        "mask": mask(lambda n, T: T - n, complement=True),
        "softmax": lambda st, _x: _with(st, w=torch.softmax(st["s"], dim=-1))}}
    if rotary:
        variants["rotary"] = {
            MESSAGES["cached_attention_restarts_positions_0_every"]: rotate(restart=True),
            MESSAGES["cached_attention_rotates_values_too_rotary"]: rotate("qkv"),
            MESSAGES["cached_attention_rotates_keys_only_queries"]: rotate("k"),
            MESSAGES["cached_attention_reads_len_cache_after"]: rotate(after=True),
            MESSAGES["cached_attention_rotates_keys_after_append"]: rotate_after_append}
        if base != ROTARY_BASE:
            variants["rotary"][MESSAGES["ignores_base"].format(
                base=base, default=ROTARY_BASE)] = rotate(turn=ROTARY_BASE)
        variants["cache"][MESSAGES["cached_attention_rotates_cached_keys_again"]] = (
            rotate_cached_again)
        optional["rotary"] = None
    return Formula(steps, variants, optional, together)


FORMULAS["cached attention"] = cached_attention_formula


def decoding_mask_formula(dims):
    """decoding_causal_mask(L_new, T): the (L_new, T) bool causal mask of the last L_new of
    T positions, aligned at the bottom-right corner (tril(T - L_new)); inputs {"L_new", "T"}
    (ints). Its variants are cached_attention_formula's mask step's (a diagonal off by k or
    the upper triangle are the mask families' of diagnose.py)."""
    def triangle(offset):
        return lambda size, _x: torch.ones(size, dtype=torch.bool).tril(offset(*size))

    steps = [("size", lambda _v, x: (x["L_new"], x["T"])),
             ("triangle", triangle(lambda n, T: T - n))]
    return Formula(steps, {"triangle": {
        MESSAGES["cached_attention_aligns_causal_mask_top"]: triangle(lambda n, T: 0),
        MESSAGES["cached_attention_flips_sign_causal_mask"]: triangle(lambda n, T: n - T)}})


FORMULAS["decoding mask"] = decoding_mask_formula


def equivariance_formula(dims):
    """equivariance_gap(layer, x, perm) = max |layer(x[:, perm]) - layer(x)[:, perm]|, as a
    tensor of one entry. Inputs: "permuted" = layer(x[:, perm]), "output" = layer(x), both
    (B, L, d_model), and "perm" (L,)."""
    steps = [("permutation of the output", lambda _v, x: x["output"][:, x["perm"]]),
             ("difference", lambda out, x: x["permuted"] - out),
             ("absolute value", lambda d, _x: d.abs()),
             ("largest entry", lambda d, _x: d.max().reshape(1))]
    variants = {"permutation of the output": {
                    MESSAGES["equivariance_uses_inverse_permutation_argsort"]:
                        lambda _v, x: x["output"][:, x["perm"].argsort()],
                    MESSAGES["equivariance_compares_with_permuted_input"]:
                        lambda _v, x: x["x"][:, x["perm"]]},
                # the same size with the absolute value; the other sign without it
                "difference": {MESSAGES["equivariance_subtracts_other_way_round"]:
                                   lambda out, x: out - x["permuted"]},
                "largest entry": {MESSAGES["equivariance_takes_mean_largest_entry"]:
                                  lambda d, _x: d.mean().reshape(1),
                                  MESSAGES["equivariance_takes_sum_largest_entry"]:
                                  lambda d, _x: d.sum().reshape(1),
                                  MESSAGES["equivariance_takes_smallest_entry_largest"]:
                                  lambda d, _x: d.min().reshape(1),
                                  MESSAGES["equivariance_first_example_only"]:
                                  lambda d, _x: d[0].max().reshape(1),
                                  MESSAGES["equivariance_divides_largest_entry_largest"]:
                                  lambda d, x: (d.max() / x["output"].abs().max()).reshape(1),
                                  MESSAGES["equivariance_takes_norm_differences_root"]:
                                  lambda d, _x: d.norm().reshape(1)},
                "absolute value": {MESSAGES["equivariance_squares_differences_taking_absolute"]:
                                       lambda d, _x: d ** 2}}
    optional = {"permutation of the output": lambda _v, x: x["output"],
                "absolute value": None}
    return Formula(steps, variants, optional)


FORMULAS["equivariance gap"] = equivariance_formula


def kv_cache_bytes_formula(dims):
    """count_kv_cache_bytes per configuration: 2 (a key and a value) * num_layers *
    num_kv_heads * head_dim * bytes_per_value. Inputs: tensors of one entry per
    configuration, "num_layers", "num_kv_heads", "head_dim", "bytes_per_value"."""
    steps = [("per head", lambda _v, x: x["head_dim"].double()),
             ("key/value heads", lambda n, x: n * x["num_kv_heads"]),
             ("layers", lambda n, x: n * x["num_layers"]),
             ("key and value (2)", lambda n, _x: 2 * n),
             ("bytes per value", lambda n, x: n * x["bytes_per_value"])]
    variants = {"bytes per value": {
        MESSAGES["kv_cache_bytes_assumes_2_bytes_per"]: lambda n, _x: 2 * n,
        MESSAGES["kv_cache_bytes_counts_bits_8_per"]: lambda n, x: 8 * n * x["bytes_per_value"]}}
    return Formula(steps, variants, ["key/value heads", "layers", "key and value (2)",
                                     "bytes per value"])


FORMULAS["KV-cache bytes"] = kv_cache_bytes_formula


def gqa_parameters_formula(dims):
    """count_gqa_parameters per configuration: W_Q and W_O d_model x d_model, W_K and W_V
    d_model x (num_kv_heads * head_dim), one bias per output feature where bias. Inputs:
    tensors of one entry per configuration, "d_model", "num_heads", "num_kv_heads", "bias"
    (0 or 1)."""
    def kv_width(_v, x):
        return x["num_kv_heads"] * (x["d_model"] // x["num_heads"])

    def weights(kv, x, leave_out=None, full=None):
        # the output features of q_proj, k_proj, v_proj, out_proj, each with d_model inputs
        outs = {"q_proj": x["d_model"], "k_proj": kv, "v_proj": kv, "out_proj": x["d_model"]}
        outs.pop(leave_out, None)
        if full is not None:   # one layer at full width: d_model outputs (its biases too)
            outs[full] = x["d_model"]
        return {"kv": kv, "outs": sum(outs.values()), "n": x["d_model"] * sum(outs.values())}

    def biases(st, x, kv_biases=None, switch=None):
        extra = 0 if kv_biases is None else 2 * (kv_biases - st["kv"])
        return st["n"] + (x["bias"] if switch is None else switch) * (st["outs"] + extra)

    steps = [("key/value width", lambda v, x: kv_width(v, x).double()),
             ("weights", weights),
             ("biases", biases)]
    variants = {
        "key/value width": {
            MESSAGES["gqa_parameters_d_model_many_key"]:
                lambda _v, x: x["d_model"].double(),
            MESSAGES["gqa_parameters_num_kv_heads_without"]:
                lambda _v, x: x["num_kv_heads"].double()},
        "weights": {MESSAGES["gqa_leaves_out_layer"].format(name=name):
                    lambda kv, x, name=name: weights(kv, x, leave_out=name)
                    for name in ("out_proj", "q_proj")}
                   | {MESSAGES["gqa_one_kv_full_width"]:
                      lambda kv, x: weights(kv, x, full="v_proj")},
        "biases": {MESSAGES["gqa_parameters_counts_d_model_biases"]:
                   lambda st, x: biases(st, x, x["d_model"]),
                   MESSAGES["gqa_parameters_counts_biases_even_when"]:
                       lambda st, x: biases(st, x, switch=1),
                   MESSAGES["gqa_parameters_bias_switch_inverted"]:
                       lambda st, x: biases(st, x, switch=1 - x["bias"])}}
    return Formula(steps, variants, {"biases": lambda st, _x: st["n"]})


FORMULAS["GQA parameter count"] = gqa_parameters_formula


# ---- chapter 7: positions (its equivariance gap, rotary and rotary decoding: above)

def _sinusoidal(positions, d_model, base=ROTARY_BASE, exponent=2.0, waves=("sin", "cos"),
                halves=False, first=0, unbracketed=False, floor=False, width=None,
                stacked_first=False):
    """The (L, d_model) table of positions (L,): pair i of row p is (waves[0], waves[1]) of
    the angle p * base ** (-exponent * i / d_model), at the features (2i, 2i + 1), or with
    `halves` at (i, i + d_model // 2); first, unbracketed, floor: _frequencies'; width: the
    exponent's denominator (d_model); stacked_first: the waves stacked on a first axis
    (2, L, P) before the reshape to (L, D)."""
    angles = positions.double()[:, None] * _frequencies(
        d_model // 2, width or d_model, base, exponent, first, unbracketed, floor)  # (L, P)
    wave = {"sin": angles.sin(), "cos": angles.cos()}
    if halves:
        return torch.cat([wave[waves[0]], wave[waves[1]]], -1)                     # (L, D)
    if stacked_first:
        return torch.stack([wave[waves[0]], wave[waves[1]]]).reshape(-1, d_model)  # (L, D)
    return torch.stack([wave[waves[0]], wave[waves[1]]], -1).flatten(-2)          # (L, D)


def sinusoidal_formula(dims, d_model, base=ROTARY_BASE):
    """sinusoidal_positions(num_positions, d_model, base): row p holds sin(p w_i) at feature
    2i and cos(p w_i) at 2i + 1, w_i = base ** (-2 i / d_model) (the frequencies of
    rotary_formula's pairs). Inputs: "positions" (L,), 0 .. num_positions - 1."""
    def table(**how):
        return lambda _v, x: _sinusoidal(x["positions"], d_model, **{"base": base, **how})

    steps = [("table", table())]
    variants = {"table": {
        MESSAGES["sinusoidal_puts_cos_p_w"]:
            table(waves=("cos", "sin")),
        MESSAGES["sinusoidal_uses_frequencies_base_i"]: table(exponent=1.0),
        MESSAGES["sinusoidal_puts_sines_first_half"]: table(halves=True),
        MESSAGES["sinusoidal_counts_positions_from_1"]:
            lambda _v, x: _sinusoidal(x["positions"] + 1, d_model, base)}}
    if base != ROTARY_BASE:
        variants["table"][MESSAGES["ignores_base"].format(base=base, default=ROTARY_BASE)] = (
            table(base=ROTARY_BASE))
    variants["table"].update({
        MESSAGES["sinusoidal_uses_frequencies_base_4"]: table(exponent=4.0),
        MESSAGES["sinusoidal_exponent_not_divided"]: table(width=1),
        MESSAGES["sinusoidal_uses_frequencies_base_2"]:
            table(exponent=-2.0),
        MESSAGES["sinusoidal_counts_pairs_i_from"]:
            table(first=1),
        MESSAGES["sinusoidal_computes_base_2_i"]: table(unbracketed=True),
        MESSAGES["sinusoidal_exponent_over_num_positions"]:
            lambda _v, x: _sinusoidal(x["positions"], d_model, base,
                                      width=x["positions"].shape[0]),
        MESSAGES["exponent_floor_division"].format(width="d_model"): table(floor=True),
        MESSAGES["sinusoidal_stacked_first_axis"]: table(stacked_first=True)})
    return Formula(steps, variants)


FORMULAS["sinusoidal table"] = sinusoidal_formula


# ==== chapter 8, the capstone: the decoder block, the training step, generation ==========

def _sublayer_reads(norm):
    """{sentence: feed-forward step} of the block's feed-forward with gate_proj, up_proj or
    both fed another tensor of the block than h = norm2(x): x after the first residual (not
    normalised), the block's input, or norm1's output (the attention's input): a sublayer
    that reads the wrong tensor. norm(t, inputs, which) is block_formula's; the state {"x": the first residual's sum, "h": norm2 of it, ...}
    (B, L, d_model) each, the inputs' "x" the block's input."""
    def tensor(which, st, x):
        return {"sum": st["x"], "input": x["x"], "norm1": norm(x["x"], x, "n1")}[which]

    def fed(which, reader):
        def step(st, x):
            other = tensor(which, st, x)
            gate = other if reader in ("gate", "both") else st["h"]
            up = other if reader in ("up", "both") else st["h"]
            hidden = (torch.nn.functional.silu(_linear(gate, x, "gate", False))
                      * _linear(up, x, "up", False))                       # (B, L, d_ff)
            return _with(st, f=_linear(hidden, x, "down", False))
        return step

    readers = {"gate": "gate_proj", "up": "up_proj",
               "both": MESSAGES["block_both_projections"]}
    # both fed the sum: norm2 left out (a skip of the formula); both fed norm2 of the input:
    # the variant block_reads_block_s_input
    return {MESSAGES["block_sublayer_reads"].format(
                reader=readers[reader], used=MESSAGES["block_tensors"][which]):
            fed(which, reader)
            for reader in readers for which in MESSAGES["block_tensors"]
            if not (reader == "both" and which == "sum")}


def block_formula(dims, num_heads, num_kv_heads, training=False):
    """The capstone's pre-RMSNorm decoder block: x + drop(attn(norm1(x))), the attention
    grouped-query (num_kv_heads key/value heads) with rotary positions 0 .. L - 1 and the
    causal mask, then x + drop(down(silu(gate(h)) * up(h))), h = norm2(x). Inputs: "x"
    (B, L, d_model), "n1_w", "n2_w" (the RMSNorms' weights), "gate_w", "up_w", "down_w" (the
    SwiGLU's, no biases), the attention's "q_w" ... "o_b" (cached_attention_formula) and
    "drop" (3, B, L, d_model): the dropout masks (kept / (1 - p), else 0) of the first, the
    second (and the third) dropout call, in the order they are made (the attention's output,
    then the feed-forward's; a mistake may make one call more), and "drop_hidden" (B, L,
    d_ff): the second call's mask where that call drops the feed-forward's hidden d_ff
    features instead (drawn after one (B, L, d_model) mask). training: the dropout masks
    act (else dropout is the identity, as in eval mode)."""
    functional = torch.nn.functional
    rotary = cached_attention_formula(dims, num_heads, num_kv_heads, rotary=True)
    unrotated = cached_attention_formula(dims, num_heads, num_kv_heads)
    plain = multihead_formula(dims, num_heads, num_kv_heads=num_kv_heads)

    def norm(t, x, which, kind="rms"):
        if kind == "layer":  # nn.LayerNorm with the weight loaded and its bias still 0
            return functional.layer_norm(t, t.shape[-1:], x[f"{which}_w"])
        return functional.rms_norm(t, t.shape[-1:], x[f"{which}_w"])

    def attend(formula=rotary):
        def step(st, x):
            if formula is plain:  # self.attn(h): no mask, no positions
                return _with(st, a=plain.run({**x, "query": st["h"], "key": st["h"],
                                              "value": st["h"], "mask": None}))
            return _with(st, a=formula.run({**x, "x": st["h"], "start": 0}))
        return step

    def swiglu(t, x, act=functional.silu, gate="gate", up="up", combine=torch.mul):
        return _linear(combine(act(_linear(t, x, gate, False)), _linear(t, x, up, False)), x,
                       "down", False)

    def ff(**how):
        return lambda st, x: _with(st, f=swiglu(st["h"], x, **how))

    # the masks go to the dropout calls in the order they are made (as a seeded nn.Dropout
    # draws them): a dropout left out shifts the later ones to the earlier masks
    def mask(st, x):
        """The mask of the next dropout call; a mistake that makes more calls than the
        masks drawn is no fit (Formula.mistakes skips a RuntimeError)."""
        drawn = st.get("drawn", 0)
        if drawn >= x["drop"].shape[0]:
            raise RuntimeError("more dropout calls than masks")
        return x["drop"][drawn]

    def dropout(which, on=training):
        return (lambda st, x: _with(st, **{which: st[which] * mask(st, x),
                                           "drawn": st.get("drawn", 0) + 1})) if on \
            else (lambda st, _x: st)

    def sum_dropped(which):  # dropout on x + sublayer(x): the residual and the dropout as one
        return lambda st, x: _with(st, x=mask(st, x) * (st["x"] + st[which]),
                                   drawn=st.get("drawn", 0) + 1)

    def norm1(which="n1", kind="rms"):
        return lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, which, kind)}

    def norm2(which="n2", kind="rms"):
        return lambda st, x: _with(st, h=norm(st["x"], x, which, kind))

    identity = lambda t: t  # noqa: E731
    steps = [("norm1", norm1()),
             ("attention", attend()),
             ("attention dropout", dropout("a")),
             ("first residual", lambda st, _x: _with(st, x=st["x"] + st["a"])),
             ("norm2", norm2()),
             ("feed-forward", ff()),
             ("feed-forward dropout", dropout("f")),
             ("second residual", lambda st, _x: st["x"] + st["f"])]
    variants = {
        "norm1": {MESSAGES["block_uses_norm2"]: norm1("n2"),
                  MESSAGES["block_uses_layernorm_which_subtracts"]:
                      norm1(kind="layer")},
        "attention": {
            MESSAGES["block_has_no_rotary_positions"]:
                attend(unrotated),
            MESSAGES["block_calls_self_attn_h"]: attend(plain),
            MESSAGES["block_attends_without_causal_mask"]: lambda st, x: _with(st, a=rotary.run(
                {**x, "x": st["h"], "start": 0}, {"mask": lambda value, _x: value}))},
        "first residual": {MESSAGES["block_adds_normalised_input_x"]:
                           lambda st, _x: _with(st, x=st["h"] + st["a"])},
        "norm2": {MESSAGES["block_uses_norm1"]: norm2("n1"),
                  MESSAGES["block_uses_layernorm_which_subtracts"]:
                      norm2(kind="layer"),
                  MESSAGES["block_normalises_attention_s_output"]:
                      lambda st, x: _with(st, h=norm(st["a"], x, "n2")),
                  MESSAGES["block_normalises_norm1_s_output"]:
                      lambda st, x: _with(st, h=norm(st["h"], x, "n2"))},
        "feed-forward": {
            MESSAGES["block_reads_block_s_input"]:
                lambda st, x: _with(st, f=swiglu(norm(x["x"], x, "n2"), x)),
            MESSAGES["block_swaps_gate_proj_up"]: ff(gate="up", up="gate"),
            MESSAGES["block_uses_gelu_silu_swiglu"]:
                ff(act=functional.gelu),
            MESSAGES["block_uses_sigmoid_silu_glu"]: ff(act=torch.sigmoid),
            MESSAGES["block_uses_relu_silu_swiglu"]:
                ff(act=functional.relu),
            MESSAGES["block_leaves_out_silu_down"]: ff(act=identity),
            MESSAGES["block_applies_silu_after_product"]:
                ff(act=identity, combine=lambda a, b: functional.silu(a * b)),
            MESSAGES["block_adds_up_proj_h"]: ff(combine=torch.add),
            MESSAGES["block_leaves_out_up_proj"]: ff(combine=lambda a, _b: a)},
        "second residual": {MESSAGES["block_adds_normalised_input_x"]:
                            lambda st, _x: st["h"] + st["f"],
                            MESSAGES["block_adds_block_s_input"]:
                            lambda st, x: x["x"] + st["f"],
                            MESSAGES["block_adds_attention_s_output"]:
                                lambda st, _x: st["a"] + st["f"]}}
    variants["feed-forward"].update(_sublayer_reads(norm))
    if training:   # a dropout done twice draws one mask more (there are three)
        twice = MESSAGES["block_dropout_twice"]
        variants["attention dropout"] = {
            twice: lambda st, x: dropout("a")(dropout("a")(st, x), x)}
        variants["feed-forward dropout"] = {
            twice: lambda st, x: dropout("f")(dropout("f")(st, x), x)}

    def no_norm1(_value, x):  # the attention (and the first residual) read x itself
        return {"x": x["x"], "h": x["x"]}

    skips = {"first residual": lambda st, _x: _with(st, x=st["a"]),
             "norm2": lambda st, _x: _with(st, h=st["x"]),
             "second residual": lambda st, _x: st["f"]}
    together = {
        MESSAGES["block_attention_reads_x_norm1"]: {"norm1": no_norm1},
        MESSAGES["block_norms_come_after_residual"]: {
            "norm1": no_norm1,
            "first residual": lambda st, x: _with(st, x=norm(st["x"] + st["a"], x, "n1")),
            "norm2": skips["norm2"],
            "second residual": lambda st, x: norm(st["x"] + st["f"], x, "n2")},
        MESSAGES["block_both_norms_layernorms_which"]: {"norm1": norm1(kind="layer"),
                                         "norm2": norm2(kind="layer")},
        MESSAGES["block_both_residual_steps_left"]: {
            "first residual": skips["first residual"],
            "second residual": skips["second residual"]}}
    if training:
        skips.update({"attention dropout": None, "feed-forward dropout": None})
        together.update({
            MESSAGES["block_both_dropout_steps_left"]: {
                "attention dropout": lambda st, _x: st, "feed-forward dropout": lambda st, _x: st},
            MESSAGES["block_dropout_applies_sublayer_s"]: {
                "norm1": lambda _v, x: {"x": x["x"], "h": norm(x["x"] * x["drop"][0], x, "n1"),
                                        "drawn": 1},
                "attention dropout": lambda st, _x: st,
                "norm2": lambda st, x: _with(st, h=norm(st["x"] * mask(st, x), x, "n2"),
                                             drawn=st["drawn"] + 1),
                "feed-forward dropout": lambda st, _x: st},
            MESSAGES["block_dropout_applies_sublayer_s_2"]: {
                "norm1": lambda _v, x: {"x": x["x"], "h": norm(x["x"], x, "n1") * x["drop"][0],
                                        "drawn": 1},
                "attention dropout": lambda st, _x: st,
                "norm2": lambda st, x: _with(st, h=norm(st["x"], x, "n2") * mask(st, x),
                                             drawn=st["drawn"] + 1),
                "feed-forward dropout": lambda st, _x: st},
            MESSAGES["block_feed_forward_dropout_applies"]: {
                "feed-forward": lambda st, x: _with(st, f=swiglu(
                    st["h"], x, combine=lambda a, b: a * b * x["drop_hidden"])),
                "feed-forward dropout": lambda st, _x: st},
            MESSAGES["block_dropout_applies_sum_x"]: {
                "attention dropout": lambda st, _x: st,
                "first residual": sum_dropped("a"),
                "feed-forward dropout": lambda st, _x: st,
                "second residual": lambda st, x: sum_dropped("f")(st, x)["x"]},
            # the same in one sublayer only (the other one's dropout where it belongs)
            MESSAGES["block_dropout_on_sum_attention"]: {
                "attention dropout": lambda st, _x: st,
                "first residual": sum_dropped("a")},
            MESSAGES["block_dropout_on_sum_feed_forward"]: {
                "feed-forward dropout": lambda st, _x: st,
                "second residual": lambda st, x: sum_dropped("f")(st, x)["x"]}})
    else:
        together[MESSAGES["block_dropout_acts_eval_mode"]] = \
            {"attention dropout": dropout("a", on=True),
                           "feed-forward dropout": dropout("f", on=True)}
    return Formula(steps, variants, skips, together)


def cached_block_formula(dims, num_heads, num_kv_heads, prefill):
    """The block run with a KV cache: a prefill of `prefill` positions, then one position per
    call, its outputs concatenated (B, L, d_model): the full forward's. Inputs: those of
    block_formula. The mistake: each call attends only over the positions it is given, from
    position 0 (a fresh cache in every call)."""
    block = block_formula(dims, num_heads, num_kv_heads)

    def alone(_value, x):
        L = x["x"].shape[1]
        pieces = [(0, min(prefill, L))] + [(t, t + 1) for t in range(prefill, L)]
        return torch.cat([block.run({**x, "x": x["x"][:, a:b]}) for a, b in pieces], dim=1)

    return Formula([("cache", lambda _v, x: block.run(x))], together={
        MESSAGES["cached_block_call_attends_only_over"]: {"cache": alone}})


FORMULAS["decoder block"] = block_formula
FORMULAS["decoder block with a cache"] = cached_block_formula


STEP_PARAMETERS = ("emb", "pos", "w", "b", "readout")  # checks.capstone.StepModel's, in order


def training_step_formula(dims, p, lr):
    """One step of next-token training of checks.capstone.StepModel (dropout p) with SGD
    (learning rate lr), as a vector: the loss, then every parameter after the step, flattened
    in STEP_PARAMETERS' order. Inputs: the parameters by name, "keep" (the model's fixed
    dropout mask), "stale_<name>" (the gradients left in .grad before the step) and "batch"
    (B, L + 1) token ids."""
    from .capstone import StepModel  # the stand-in model the check hands train_step
    functional = torch.nn.functional

    def logits(st, x):
        model = StepModel({n: x[n] for n in STEP_PARAMETERS}, x["keep"], p)
        return _with(st, model=model, logits=model.train(st["training"])(st["inputs"]))

    def loss(how=None, by=functional.cross_entropy, **options):
        return lambda st, _x: _with(st, loss=by(
            (how or (lambda z: z))(st["logits"]).flatten(0, 1), st["targets"].flatten(),
            **options))

    def per_sequence(st, _x):   # summed over the positions, averaged over the batch
        return _with(st, loss=loss(reduction="sum")(st, _x)["loss"] / st["logits"].shape[0])

    def update(step=True, steps=1):
        def after(st, x):
            parameters = [getattr(st["model"], n) for n in STEP_PARAMETERS]
            grads = torch.autograd.grad(st["loss"], parameters)
            new = [w - steps * lr * (g + st["stale"][n]) if step else w
                   for n, w, g in zip(STEP_PARAMETERS, parameters, grads)]
            return torch.cat([st["loss"].reshape(1)] + [w.flatten() for w in new]).detach()
        return after

    def pair(inputs, targets):
        return lambda st, x: _with(st, inputs=x["batch"][:, inputs], targets=x["batch"][:, targets])

    steps = [("model.train()", lambda _v, _x: {"training": True}),
             ("inputs and targets", pair(slice(None, -1), slice(1, None))),
             ("logits", logits),
             ("cross-entropy", loss()),
             ("optimizer.zero_grad()", lambda st, _x: _with(
                 st, stale={n: 0.0 for n in STEP_PARAMETERS})),
             ("loss.backward() and optimizer.step()", update())]
    variants = {
        "inputs and targets": {
            MESSAGES["training_step_uses_batch_1_targets"]: pair(slice(None, -1), slice(None, -1)),
            MESSAGES["training_step_exchanges_inputs_batch_1"]:
                pair(slice(1, None), slice(None, -1))},
        "cross-entropy": {
            MESSAGES["training_step_softmax_given"]: loss(lambda z: z.softmax(-1)),
            MESSAGES["training_step_sums_over_positions_reduction"]:
                loss(reduction="sum"),
            MESSAGES["training_step_f_nll_loss_raw"]:
                loss(by=functional.nll_loss),
            MESSAGES["training_step_averages_over_batch_only"]: per_sequence,
            MESSAGES["training_step_flattens_logits_l_b"]: loss(lambda z: z.transpose(0, 1)),
            MESSAGES["training_step_scores_last_position_only"]:
                lambda st, _x: _with(st, loss=functional.cross_entropy(
                st["logits"][:, -1], st["targets"][:, -1]))}}
    skips = {"model.train()": lambda _v, _x: {"training": False},
             "optimizer.zero_grad()": lambda st, x: _with(
                 st, stale={n: x[f"stale_{n}"] for n in STEP_PARAMETERS})}
    return Formula(steps, variants, skips, together={
        MESSAGES["training_step_logits_those_whole_batch"]: {
            "inputs and targets": pair(slice(None), slice(1, None)),
            "cross-entropy": lambda st, x: loss(lambda z: z[:, 1:])(st, x)},
        MESSAGES["training_step_parameters_did_change_no"]:
            {"loss.backward() and optimizer.step()": update(step=False)},
        MESSAGES["training_step_parameters_moved_two_optimizer"]:
            {"loss.backward() and optimizer.step()": update(steps=2)}})


FORMULAS["training step"] = training_step_formula


def generation_formula(dims, num_tokens, use_cache):
    """Greedy decoding of checks.capstone.DecoderModel: the logits each new token was chosen
    from, (B, num_tokens, V), in eval mode without gradients; with use_cache, a prefill of the
    prompt then the newest token alone at start = len(cache). Inputs: the model's parameters
    by name ("emb", "pos", "wq", "wk", "wv", "readout"), "keep" (its dropout mask in training
    mode) and "prompt" (B, P) token ids."""
    from .capstone import DecoderModel  # the stand-in model the check hands generate

    def decode(cfg, x):
        params = {n: x[n] for n in ("emb", "pos", "wq", "wk", "wv", "readout")}
        model = DecoderModel(params, x["keep"]).train(cfg["training"])
        held = model.new_caches() if use_cache else None
        tokens, chosen = x["prompt"], []
        with torch.no_grad():
            for step in range(num_tokens):
                fed, start = tokens, 0                       # the prefill, or no cache
                if use_cache and step:                       # then the newest token alone
                    fed, start = tokens[:, -1:], cfg["start"](len(held[0]))
                logits = model(fed, caches=held, start=start)               # (B, L, V)
                chosen.append(logits[:, cfg["position"]])                   # (B, V)
                tokens = torch.cat([tokens, chosen[-1].argmax(-1, keepdim=True)], 1)
        return torch.stack(chosen, 1)                                       # (B, T, V)

    steps = [("model.eval()", lambda _v, _x: {"training": False}),
             ("start = len(cache)", lambda cfg, _x: _with(cfg, start=lambda cached: cached)),
             ("logits[:, -1]", lambda cfg, _x: _with(cfg, position=-1)),
             ("decoding", decode)]
    variants = {"logits[:, -1]": {MESSAGES["generation_reads_logits_0_first"]:
                                      lambda cfg, _x: _with(cfg, position=0)}}
    if use_cache:
        variants["start = len(cache)"] = {
            MESSAGES["generation_passes_len_cache_1"]:
                lambda cfg, _x: _with(cfg, start=lambda cached: cached + 1),
            MESSAGES["generation_passes_0_start_s"]:
                lambda cfg, _x: _with(cfg, start=lambda cached: 0)}
    skips = {"model.eval()": lambda _v, _x: {"training": True}}
    return Formula(steps, variants, skips, together={
        MESSAGES["generation_logits_step_returned_probabilities"]:
            {"decoding": lambda cfg, x: decode(cfg, x).softmax(-1)}})


FORMULAS["greedy generation"] = generation_formula
