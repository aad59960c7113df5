"""Chapter 2's checks (chapters/checks/heads.py), tested without nbgrader.

The notebook's own cells run as the grader runs them (tests/chapter.py): its given cells'
definitions and its solution cells (reference code, or a catalogue submission's code), then
the test cells, visible and hidden.
"""
import json

import pytest
import torch

import solutions
from tests.chapter import HIDDEN_MARKER, Chapter, CheckFailure, imports_solutions
from tests.submissions import heads as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/heads.py, as the notebook imports it


# ------------------------------------------------------------------ the notebook itself
def test_notebook_has_the_expected_cells():
    assert set(CHAPTER.solutions) == {"split_heads", "merge_heads", "multihead_attention_core",
                                      "head_projection", "fuse_head_weights"}
    assert set(CHAPTER.tests) == {"test_split_heads", "test_split_heads_divisibility",
                                  "test_merge_heads", "test_multihead_attention_core",
                                  "test_head_projection", "test_fuse_head_weights"}
    assert all(HIDDEN_MARKER in src for src in CHAPTER.tests.values())
    assert 10 <= CHAPTER.points <= 20
    assert "import solutions" not in json.dumps(CHAPTER.notebook)


def test_reference_cells_pass_every_test():
    assert CHAPTER.run_tests(CHAPTER.namespace()) == dict.fromkeys(CHAPTER.tests)


def test_solutions_package_passes_every_test():
    """The importable reference (solutions/) passes the same visible and hidden tests."""
    def core(query, key, value, num_heads):
        q, k, v = (solutions.split_heads(t, num_heads) for t in (query, key, value))
        heads, weights = solutions.scaled_dot_product_attention(q, k, v)
        return solutions.merge_heads(heads), weights

    def head_projection(x, weight, bias, i, num_heads):
        mha = solutions.MultiHeadAttention(weight.shape[0], num_heads, query_size=weight.shape[1],
                                           bias=bias is not None, dtype=weight.dtype)
        with torch.no_grad():
            mha.q_proj.weight.copy_(weight)
            if bias is not None:
                mha.q_proj.bias.copy_(bias)
        per_head = mha.head_weights()                   # W_i^Q as views of the fused weight
        out = x @ per_head.query[i]
        return out if bias is None else out + per_head.query_bias[i]

    ns = CHAPTER.namespace()
    ns.update(split_heads=solutions.split_heads, merge_heads=solutions.merge_heads,
              multihead_attention_core=core, head_projection=head_projection)
    with torch.no_grad():
        assert CHAPTER.run_tests(ns) == dict.fromkeys(CHAPTER.tests)


def test_fuse_head_weights_inverts_solutions_head_weights():
    ns = CHAPTER.namespace()
    mha = solutions.MultiHeadAttention(12, 3, query_size=7)
    with torch.no_grad():
        fused = ns["fuse_head_weights"](mha.head_weights().query)
    assert torch.equal(fused, mha.q_proj.weight)


def test_blank_submission_fails_every_test():
    # what nbgrader's generate_assignment leaves in each solution cell
    blank = CHAPTER.blank()
    assert all("NotImplementedError" in code for code in blank.values())
    results = CHAPTER.run_tests(CHAPTER.namespace(blank))
    assert all(message and "not implemented" in message for message in results.values()), results


def test_hard_coded_outputs_fail_hidden_tests():
    """Returning the visible test's expected output passes it and fails the hidden ones."""
    ns = CHAPTER.namespace()
    x = check._tokens(2, 5, 12, 0, torch.float32, True)
    frozen = ns["split_heads"](x, 3).clone()
    cheat = CHAPTER.namespace({"split_heads": '''
def split_heads(x, num_heads):
    if x.shape[-1] % num_heads:
        raise ValueError(f"d_model={x.shape[-1]} num_heads={num_heads}")
    return FROZEN.clone()
'''})
    cheat["FROZEN"] = frozen
    assert CHAPTER.run("test_split_heads", cheat, hidden=False) is None
    assert CHAPTER.run("test_split_heads", cheat) is not None


# ------------------------------------------------------------------ the catalogue
def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 3
    assert len(catalogue.BUGS) >= 3


# ------------------------------------------------------------------ the checks module
def test_checks_do_not_import_solutions():
    assert not imports_solutions("heads")


def test_rebinding_allclose_does_not_fool_the_checks():
    ns = CHAPTER.namespace({"split_heads": '''
import torch

def split_heads(x, num_heads):
    if x.shape[-1] % num_heads:
        raise ValueError(f"d_model={x.shape[-1]} num_heads={num_heads}")
    torch.allclose = lambda *a, **k: True
    torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)
    return x.reshape(x.shape[0], num_heads, x.shape[1], -1)
'''})
    saved = torch.allclose, torch.isclose
    try:
        message = CHAPTER.run("test_split_heads", ns)
    finally:
        torch.allclose, torch.isclose = saved
    assert message and "heads and positions are mixed" in message


@pytest.mark.parametrize("layout, pattern", [
    ("x.view(B, L, h, hd)", r"you gave \(B, L, num_heads, head_dim\), the answer is "
                            r"\(B, num_heads, L, head_dim\)"),
    ("x.view(B, L, h, hd).transpose(2, 3)", r"you gave \(B, L, head_dim, num_heads\)"),
    ("x.view(B, L, h, hd).permute(2, 1, 0, 3)", r"you gave \(num_heads, L, B, head_dim\)"),
])
def test_split_heads_names_wrong_layouts(layout, pattern):
    def split(x, num_heads):
        B, L, D = x.shape
        h, hd = num_heads, D // num_heads
        return eval(layout)
    with pytest.raises(CheckFailure, match=pattern):
        check.split_heads(split)


def test_merge_heads_names_the_missing_flatten():
    with pytest.raises(CheckFailure, match=r"the d_model axis \(12\) is still split into two "
                                            r"axes, num_heads x head_dim"):
        check.merge_heads(lambda x: x.transpose(1, 2))


def test_fuse_head_weights_names_the_x_at_w_matrix():
    with pytest.raises(CheckFailure, match=r"x @ W matrix"):
        check.fuse_head_weights(lambda w: torch.cat(list(w), dim=1))


def test_core_forbids_nn_multiheadattention():
    def delegate(query, key, value, num_heads):
        D = query.shape[-1]
        m = torch.nn.MultiheadAttention(D, num_heads, batch_first=True)
        return m(query, key, value, average_attn_weights=False)
    with pytest.raises(CheckFailure, match=r"does the whole exercise for you"):
        check.multihead_attention_core(delegate)


def test_divisibility_message_must_name_both_numbers():
    def split(x, num_heads):
        raise ValueError("bad number of heads")
    with pytest.raises(CheckFailure, match=r"does not name d_model, num_heads"):
        check.split_heads_divisibility(split)


@pytest.mark.parametrize("first, second", [(0, 1), (0, 2), (1, 2)])
def test_core_tells_every_two_inputs_apart(first, second):
    """query, key and value are three different tensors in every call of the core's check
    (self-attention included), so that a core which reads one for another, in any pair, fails:
    a check that passed one tensor as both key and value could not see them swapped."""
    core = CHAPTER.namespace()["multihead_attention_core"]

    def swapped(*inputs):
        inputs = list(inputs)
        inputs[first], inputs[second] = inputs[second], inputs[first]
        return core(*inputs)
    for kwargs in ({}, {"seed": 22, "B": 1, "Lq": 6, "num_heads": 4, "head_dim": 3}):
        with pytest.raises(CheckFailure):
            check.multihead_attention_core(swapped, **kwargs)


@pytest.mark.parametrize("message", [
    "d_model=10 is not divisible by num_heads=3",
    "num_heads (3) does not divide d_model (10).",
    "10 (d_model) is not divisible by 3 (num_heads)",
    "d_model % num_heads != 0: d_model=10, num_heads=3",
    "Cannot split 10 features (d_model) into 3 heads (num_heads)",   # no number beside a name
])
def test_divisibility_message_pairs_each_number_with_its_name(message):
    def split(x, num_heads):
        raise ValueError(message)
    with pytest.raises(CheckFailure, match=r"refuses every input"):   # passes the pairing
        check.split_heads_divisibility(split)


@pytest.mark.parametrize("message", ["d_model=3 is not divisible by num_heads=10",
                                     "num_heads: 10, d_model: 3"])
def test_divisibility_message_with_the_numbers_swapped_fails(message):
    def split(x, num_heads):
        raise ValueError(message)
    with pytest.raises(CheckFailure, match=r"the two numbers are swapped"):
        check.split_heads_divisibility(split)


def test_head_projection_reads_only_head_is_block():
    def projects_everything(x, weight, bias, i, num_heads):
        head_dim = weight.shape[0] // num_heads
        return torch.nn.functional.linear(x, weight, bias)[..., i * head_dim:(i + 1) * head_dim]
    with pytest.raises(CheckFailure, match=r"reads the other heads' rows of the weight: .*"
                                           r"gradient of your result with respect to x"):
        check.head_projection(projects_everything)
