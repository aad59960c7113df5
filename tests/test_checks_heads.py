"""Chapter 2's checks (chapters/checks/heads.py), tested without nbgrader.

The notebook's own cells are executed in a plain namespace: the setup cell, the visible
chapter-1 cell, the solution cells (reference code, or a catalogue submission's code) and
then the test cells, visible and hidden, exactly as autograde runs them.
"""
import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "chapters"))

import solutions  # noqa: E402
from checks import heads as check  # noqa: E402
from checks.common import CheckFailure  # noqa: E402
from tests.submissions import SOLUTION_BLOCK, grade_id, reference_code  # noqa: E402
from tests.submissions import heads as catalogue  # noqa: E402

NOTEBOOK = json.loads((REPO / "chapters" / f"{catalogue.NOTEBOOK}.ipynb").read_text())
HIDDEN = "### BEGIN HIDDEN TESTS"


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


CODE = [c for c in NOTEBOOK["cells"] if c["cell_type"] == "code"]
SETUP = "\n".join(line for line in _source(CODE[0]).splitlines()
                  if not line.lstrip().startswith("%"))  # magics, also indented ones
CHAPTER1 = next(_source(c) for c in CODE
                if not _nbgrader(c) and "def scaled_dot_product_attention(" in _source(c))
RAW_SOLUTIONS = {grade_id(c): _source(c) for c in CODE if _nbgrader(c).get("solution")}
SOLUTIONS = {gid: reference_code(src) for gid, src in RAW_SOLUTIONS.items()}
TESTS = {grade_id(c): _source(c) for c in CODE if _nbgrader(c).get("grade")}


def namespace(cells=None):
    """The notebook's functions, with `cells` {grade_id: code} replacing the reference."""
    cells = cells or {}
    unknown = set(cells) - set(SOLUTIONS)
    assert not unknown, f"no solution cells named {unknown}"
    ns = {"__name__": "__main__"}
    exec(SETUP, ns)
    exec(CHAPTER1, ns)
    for gid, code in SOLUTIONS.items():
        exec(cells.get(gid, code), ns)
    return ns


def run(source, ns):
    """None if the cell passes, else the failure message (stdout swallowed)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(source, ns)
    except CheckFailure as failure:
        return str(failure)
    return None


def run_tests(ns, visible_only=False):
    return {gid: run(src.split(HIDDEN)[0] if visible_only else src, ns)
            for gid, src in TESTS.items()}


# ------------------------------------------------------------------ the notebook itself
def test_notebook_has_the_expected_cells():
    assert set(SOLUTIONS) == {"split_heads", "merge_heads", "multihead_attention_core",
                              "head_projection", "fuse_head_weights"}
    assert set(TESTS) == {"test_split_heads", "test_split_heads_divisibility", "test_merge_heads",
                          "test_multihead_attention_core", "test_head_projection",
                          "test_fuse_head_weights"}
    assert all(HIDDEN in src for src in TESTS.values())
    points = sum(_nbgrader(c)["points"] for c in CODE if _nbgrader(c).get("grade"))
    assert 10 <= points <= 20
    assert "import solutions" not in json.dumps(NOTEBOOK)


def test_reference_cells_pass_every_test():
    assert run_tests(namespace()) == dict.fromkeys(TESTS)


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

    ns = namespace()
    ns.update(split_heads=solutions.split_heads, merge_heads=solutions.merge_heads,
              multihead_attention_core=core, head_projection=head_projection)
    with torch.no_grad():
        assert run_tests(ns) == dict.fromkeys(TESTS)


def test_fuse_head_weights_inverts_solutions_head_weights():
    ns = namespace()
    mha = solutions.MultiHeadAttention(12, 3, query_size=7)
    with torch.no_grad():
        fused = ns["fuse_head_weights"](mha.head_weights().query)
    assert torch.equal(fused, mha.q_proj.weight)


def test_blank_submission_fails_every_test():
    # what nbgrader's generate_assignment leaves in each solution cell
    blank = {gid: SOLUTION_BLOCK.sub("    # YOUR CODE HERE\n    raise NotImplementedError()\n", src)
             for gid, src in RAW_SOLUTIONS.items()}
    assert all("NotImplementedError" in code for code in blank.values())
    results = run_tests(namespace(blank))
    assert all(message and "not implemented" in message for message in results.values()), results


def test_hard_coded_outputs_fail_hidden_tests():
    """Returning the visible test's expected output passes it and fails the hidden ones."""
    ns = namespace()
    x = check._tokens(2, 5, 12, 0, torch.float32, True)
    frozen = ns["split_heads"](x, 3).clone()
    cheat = namespace({"split_heads": '''
def split_heads(x, num_heads):
    if x.shape[-1] % num_heads:
        raise ValueError(f"d_model={x.shape[-1]} num_heads={num_heads}")
    return FROZEN.clone()
'''})
    cheat["FROZEN"] = frozen
    source = TESTS["test_split_heads"]
    assert run(source.split(HIDDEN)[0], cheat) is None
    assert run(source, cheat) is not None


# ------------------------------------------------------------------ the catalogue
def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 3
    assert len(catalogue.BUGS) >= 3


# ------------------------------------------------------------------ the checks module
def test_checks_do_not_import_solutions():
    text = (REPO / "chapters" / "checks" / "heads.py").read_text()
    assert "solutions" not in re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.M)


def test_rebinding_allclose_does_not_fool_the_checks():
    ns = namespace({"split_heads": '''
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
        message = run(TESTS["test_split_heads"], ns)
    finally:
        torch.allclose, torch.isclose = saved
    assert message and "heads and positions are mixed" in message


@pytest.mark.parametrize("layout, pattern", [
    ("x.view(B, L, h, hd)", r"\(B, L, num_heads, head_dim\).*add \.transpose\(1, 2\)"),
    ("x.view(B, L, h, hd).transpose(2, 3)", r"transposed the last two axes"),
    ("x.view(B, L, h, hd).permute(2, 1, 0, 3)", r"batch axis B stays first"),
])
def test_split_heads_names_wrong_layouts(layout, pattern):
    def split(x, num_heads):
        B, L, D = x.shape
        h, hd = num_heads, D // num_heads
        return eval(layout)
    with pytest.raises(CheckFailure, match=pattern):
        check.split_heads(split)


def test_merge_heads_names_the_missing_flatten():
    with pytest.raises(CheckFailure, match=r"must be flattened into d_model"):
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
