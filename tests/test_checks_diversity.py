"""Chapter 5's checks (chapters/checks/diversity.py), tested without nbgrader.

The notebook's own cells are executed in a plain namespace: the setup cell and the solution
cells (reference code, or a catalogue submission's code), then the test cells, visible and
hidden, exactly as autograde runs them. No training runs here: the checks build their own
small inputs.
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
from checks import diversity as check  # noqa: E402
from checks.common import CheckFailure  # noqa: E402
from tests.submissions import SOLUTION_BLOCK, grade_id, reference_code  # noqa: E402
from tests.submissions import diversity as catalogue  # noqa: E402

NOTEBOOK = json.loads((REPO / "chapters" / f"{catalogue.NOTEBOOK}.ipynb").read_text())
HIDDEN = "### BEGIN HIDDEN TESTS"


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


CODE = [c for c in NOTEBOOK["cells"] if c["cell_type"] == "code"]
SETUP = "\n".join(line for line in _source(CODE[0]).splitlines()
                  if not line.lstrip().startswith("%"))  # magics, also indented ones
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


REF = namespace()


# ------------------------------------------------------------------ the notebook itself
def test_notebook_has_the_expected_cells():
    assert set(SOLUTIONS) == {"relation_scores", "make_heads_identical", "head_similarity",
                              "ablation_importance", "prune_heads"}
    assert set(TESTS) == {"test_relation_scores", "test_make_heads_identical",
                          "test_head_similarity", "test_ablation_importance",
                          "test_prune_heads"}
    assert all(HIDDEN in src for src in TESTS.values())
    points = sum(_nbgrader(c)["points"] for c in CODE if _nbgrader(c).get("grade"))
    assert 10 <= points <= 20
    # chapter 5 may use the reference package (its release ships it), but the exercises'
    # own functions must not come from it
    setup = _source(CODE[0])
    for name in SOLUTIONS:
        assert not re.search(rf"\b{name}\b", setup), f"the setup cell imports {name}"


def test_reference_cells_pass_every_test():
    assert run_tests(namespace()) == dict.fromkeys(TESTS)


def test_solutions_package_passes_every_test():
    """The importable reference (solutions/) passes the same visible and hidden tests."""
    ns = namespace()
    ns.update(relation_scores=solutions.relation_scores,
              make_heads_identical=solutions.make_heads_identical,
              head_similarity=solutions.head_similarity,
              ablation_importance=lambda model, batch: solutions.head_importance(
                  model, batch).ablation,
              prune_heads=solutions.prune_heads)
    assert run_tests(ns) == dict.fromkeys(TESTS)


def test_notebook_functions_equal_the_solutions_package():
    """The notebook teaches the package's code: same results on a trained-size model."""
    torch.manual_seed(0)
    model = solutions.TinyAttentionModel(11, 6, 12, 3, seed=0)
    batch = solutions.two_relation_task(20, 6, 11, torch.Generator().manual_seed(1))
    with torch.no_grad():
        weights = model(batch.tokens)[2]
    for ours, theirs in zip(REF["relation_scores"](weights), solutions.relation_scores(weights)):
        assert torch.equal(ours, theirs)
    assert torch.equal(REF["head_similarity"](weights), solutions.head_similarity(weights))
    torch.testing.assert_close(REF["ablation_importance"](model, batch),
                               solutions.head_importance(model, batch).ablation)
    a, b = (solutions.MultiHeadAttention(12, 3, key_size=5) for _ in range(2))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        for p in a.parameters():
            p.copy_(torch.randn_like(p))
    b.load_state_dict(a.state_dict())
    REF["make_heads_identical"](a)
    solutions.make_heads_identical(b)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    mha = solutions.MultiHeadAttention(12, 4, value_size=7)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn_like(p))
    ours, theirs = REF["prune_heads"](mha, [2, 0]), solutions.prune_heads(mha, [2, 0])
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, theirs.state_dict()[key]), key
    for bad in ([4], [0, 1, 2, 3]):
        with pytest.raises(ValueError):
            REF["prune_heads"](mha, bad)


def test_blank_submission_fails_every_test():
    # what nbgrader's generate_assignment leaves in each solution cell
    blank = {gid: SOLUTION_BLOCK.sub("    # YOUR CODE HERE\n    raise NotImplementedError()\n", src)
             for gid, src in RAW_SOLUTIONS.items()}
    assert all("NotImplementedError" in code for code in blank.values())
    results = run_tests(namespace(blank))
    assert all(message and "not implemented" in message for message in results.values()), results


def test_hard_coded_outputs_fail_hidden_tests():
    """Returning the visible test's expected output passes it and fails the hidden ones."""
    weights = check._attention_maps(3, 2, 6, 6, 0, causal=True).float()
    frozen = REF["relation_scores"](weights)
    cheat = namespace({"relation_scores": '''
def relation_scores(weights):
    return FROZEN
'''})
    cheat["FROZEN"] = frozen
    source = TESTS["test_relation_scores"]
    assert run(source.split(HIDDEN)[0], cheat) is None
    assert run(source, cheat) is not None


# ------------------------------------------------------------------ the catalogue
def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 2
    assert len(catalogue.BUGS) >= 3


# ------------------------------------------------------------------ the checks module
def test_checks_do_not_import_solutions():
    text = (REPO / "chapters" / "checks" / "diversity.py").read_text()
    assert "solutions" not in re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.M)


def test_rebinding_allclose_does_not_fool_the_checks():
    ns = namespace({"head_similarity": '''
import torch

def head_similarity(weights):
    torch.allclose = lambda *a, **k: True
    torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)
    maps = weights.flatten(2)
    return (maps @ maps.transpose(1, 2)).mean(0)
'''})
    saved = torch.allclose, torch.isclose
    try:
        message = run(TESTS["test_head_similarity"], ns)
    finally:
        torch.allclose, torch.isclose = saved
    assert message and "not normalised" in message


def _fails(check_call, pattern):
    with pytest.raises(CheckFailure, match=re.compile(pattern, re.S)):
        with contextlib.redirect_stdout(io.StringIO()):
            check_call()


def _function(cell, code, name=None):
    return namespace({cell: code})[name or cell]


SCORES = "def relation_scores(weights):\n    i = torch.arange(2, weights.shape[-1])\n    {}\n"


@pytest.mark.parametrize("body, pattern", [
    ("return RelationScores(torch.diagonal(weights, offset=1, dim1=-2, dim2=-1).mean((0, 2)), "
     "weights[:, :, i, 0].mean((0, 2)))", r"prev is 0 for every head.*above the diagonal"),
    ("return RelationScores(weights[:, :, i - 1, i].mean((0, 2)), weights[:, :, i, 0].mean((0, 2)))",
     r"prev is 0 for every head.*query and key swapped"),
    ("return RelationScores(weights[:, :, i, i - 1].mean((0, 2)), weights[:, :, 0, i].mean((0, 2)))",
     r"first is 0 for every head.*weights\[\.\.\., i, 0\]"),
    ("return RelationScores(weights[:, :, i, 0].mean((0, 2)), weights[:, :, i, i - 1].mean((0, 2)))",
     r"swapped"),
    ("return RelationScores(weights[:, :, i, i - 1].sum(2).mean(0), weights[:, :, i, 0].mean((0, 2)))",
     r"summed over the query positions"),
    ("return RelationScores(weights[:, :, i, i - 1].mean((0, 2)), weights[:, :, 1:, 0].mean((0, 2)))",
     r"included query positions 1"),
    ("return RelationScores(weights[:, :, i, i - 1].mean((1, 2)), weights[:, :, i, 0].mean((1, 2)))",
     r"averaged over the heads"),
    ("return RelationScores(weights[:, :, i, i - 1].mean(0), weights[:, :, i, 0].mean(0))",
     r"keeping one number per head"),
    ("return torch.stack([weights[:, :, i, i - 1].mean((0, 2)), weights[:, :, i, 0].mean((0, 2))])",
     r"returned one tensor"),
    ("weights[:, :, 0] = 0\n    return RelationScores(weights[:, :, i, i - 1].mean((0, 2)), "
     "weights[:, :, i, 0].mean((0, 2)))", r"changed its input in place"),
    ("return RelationScores(weights[:, :, i, i - 1].mean((0, 2)).double(), "
     "weights[:, :, i, 0].mean((0, 2)))", r"dtype"),
])
def test_relation_scores_diagnoses(body, pattern):
    fn = _function("relation_scores", SCORES.format(body))
    _fails(lambda: check.relation_scores(fn), pattern)


SIMILARITY = "def head_similarity(weights):\n    {}\n"


@pytest.mark.parametrize("body, pattern", [
    ("return F.cosine_similarity(weights[:, :, None], weights[:, None], dim=-1).mean((0, 3))",
     r"one query row at a time"),
    ("m = F.normalize(weights.flatten(2), dim=-1)\n    return m @ m.transpose(1, 2)",
     r"average the per-example matrices over the batch"),
    ("m = F.normalize(weights.mean(0).flatten(1), dim=-1)\n    return m @ m.T",
     r"averaged the maps over the batch before"),
    ("m = F.normalize(weights.transpose(0, 1).flatten(1), dim=-1)\n    return m @ m.T",
     r"flattened the batch"),
    ("m = weights.flatten(2)\n    m = F.normalize(m - m.mean(-1, keepdim=True), dim=-1)\n"
     "    return (m @ m.transpose(1, 2)).mean(0)", r"Pearson"),
    ("m = F.normalize(weights.flatten(2), dim=1)\n    return (m @ m.transpose(1, 2)).mean(0)",
     r"wrong axis"),
    ("m = F.normalize(weights.flatten(2), dim=-1)\n    return (m @ m.transpose(1, 2)).sum(0)",
     r"summed over the batch"),
])
def test_head_similarity_diagnoses(body, pattern):
    fn = _function("head_similarity", SIMILARITY.format(body))
    _fails(lambda: check.head_similarity(fn), pattern)


IDENTICAL = SOLUTIONS["make_heads_identical"]


@pytest.mark.parametrize("old, new, pattern", [
    ("@torch.no_grad()\n", "", r"leaf Variable.*torch\.no_grad\(\)"),
    ("    return mha\n", "    return None\n", r"returned None"),
    ("    return mha\n", "    return copy.deepcopy(mha)\n", r"returned another object"),
    ("    columns[:, 1:] = columns[:, :1]\n", "", r"out_proj\.weight was not changed"),
    ("    columns[:, 1:] = columns[:, :1]\n",
     "    columns[:, 1:] = columns[:, :1]\n    mha.out_proj.bias.zero_()\n",
     r"out_proj\.bias changed"),
    ("        rows = proj.weight.view(h, hd, -1)          # (h, hd, in): head i's rows, a view\n"
     "        rows[1:] = rows[:1]\n",
     "        rows = proj.weight.view(hd, h, -1)\n        rows[:, 1:] = rows[:, :1]\n",
     r"strided rows of q_proj\.weight"),
    ("        rows = proj.weight.view(h, hd, -1)          # (h, hd, in): head i's rows, a view\n"
     "        rows[1:] = rows[:1]\n",
     "        cols = proj.weight.view(-1, h, hd)\n        cols[:, 1:] = cols[:, :1]\n",
     r"copied columns of q_proj\.weight"),
    ("    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):\n",
     "    for proj in (mha.q_proj, mha.k_proj):\n", r"v_proj\.weight was not changed"),
    ("    return mha\n", "    mha.q_proj.weight = torch.nn.Parameter(mha.q_proj.weight.clone())\n"
     "    return mha\n", r"replaced the parameter q_proj\.weight"),
])
def test_make_heads_identical_diagnoses(old, new, pattern):
    assert old in IDENTICAL, old
    fn = _function("make_heads_identical", IDENTICAL.replace(old, new))
    _fails(lambda: check.make_heads_identical(fn, REF["MultiHeadAttention"]), pattern)


ABLATION = SOLUTIONS["ablation_importance"]


@pytest.mark.parametrize("old, new, pattern", [
    ("        importance[k] = loss(gates) - base\n", "        importance[k] = loss(gates)\n",
     r"return the increase"),
    ("        importance[k] = loss(gates) - base\n", "        importance[k] = base - loss(gates)\n",
     r"sign is reversed"),
    ("        return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))\n",
     "        return relation_losses(logits_prev, logits_first, prev_target, first_target)[1]\n",
     r"only the first loss"),
    ("        return sum(relation_losses(logits_prev, logits_first, prev_target, first_target))\n",
     "        return (F.cross_entropy(logits_prev.flatten(0, 1), prev_target.flatten(), "
     "reduction='sum')\n                + F.cross_entropy(logits_first.flatten(0, 1), "
     "first_target.flatten(), reduction='sum'))\n", r"summed the cross-entropy"),
    ("        importance[k] = loss(gates) - base\n",
     "        importance[k] = loss(gates) - base\n        model.w_out.mul_(1.0)\n"
     "        model.w_out[0, 0] += 1.0\n", r"changed the model's parameter w_out"),
    ("    return importance\n", "    return importance.tolist()\n", r"expected a torch\.Tensor"),
])
def test_ablation_importance_diagnoses(old, new, pattern):
    assert old in ABLATION, old
    fn = _function("ablation_importance", ABLATION.replace(old, new))
    _fails(lambda: check.ablation_importance(fn), pattern)


def test_ablation_importance_names_the_gradient_score():
    def gradient_score(model, batch):
        return solutions.head_importance(model, batch).gradient
    _fails(lambda: check.ablation_importance(gradient_score), r"gradient score")


PRUNE = SOLUTIONS["prune_heads"]


@pytest.mark.parametrize("old, new, pattern", [
    ("        if mha.bias:\n            small.bias.copy_(old.bias[rows])                      # (h'*hd,)\n",
     "", r"q_proj\.bias was not copied"),
    ("    if mha.bias:\n        new.out_proj.bias.copy_(mha.out_proj.bias)\n", "",
     r"out_proj\.bias was not copied"),
    ("dropout=mha.dropout, head_dim=hd,", "dropout=mha.dropout,", r"build it with head_dim=mha\.head_dim"),
    ("    keep = [k for k in range(h) if k not in remove]\n",
     "    keep = list(range(h - len(remove)))\n", r"holds the heads \[0, 1, 2\]"),
    ("    return new.train(mha.training)\n", "    return mha\n", r"returned mha itself"),
    ("    return new.train(mha.training)\n",
     "    mha.q_proj.weight.zero_()\n    return new.train(mha.training)\n",
     r"changed the original module's q_proj\.weight"),
    ("device=ref.device,\n                             dtype=ref.dtype)", ")", r"dtype"),
    ("    return new.train(mha.training)\n", "    return None\n", r"returned None"),
])
def test_prune_heads_diagnoses(old, new, pattern):
    assert old in PRUNE, old
    fn = _function("prune_heads", PRUNE.replace(old, new))
    kwargs = dict(dtype=torch.float64) if "dtype" in pattern else {}
    _fails(lambda: check.prune_heads(fn, REF["MultiHeadAttention"], **kwargs), pattern)


def test_gated_model_matches_the_chapter_interface():
    """The check's stand-in model obeys TinyAttentionModel's interface and gates."""
    model = check.GatedModel(11, 6, 12, 3, seed=0, dtype=torch.float32)
    tokens = torch.randint(11, (4, 6))
    logits_prev, logits_first, weights = model(tokens)
    assert logits_prev.shape == logits_first.shape == (4, 6, 11)
    assert weights.shape == (4, 3, 6, 6)
    assert (weights.triu(1) == 0).all()                      # causal
    off = model(tokens, head_mask=torch.zeros(3))[0]
    assert torch.allclose(off, torch.zeros_like(off))        # no head: no signal (no biases)
    with pytest.raises(ValueError, match="head_mask"):
        model(tokens, head_mask=torch.ones(2))
