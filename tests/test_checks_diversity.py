"""Chapter 5's checks (chapters/checks/diversity.py), tested without nbgrader.

The notebook's own cells run as the grader runs them (tests/chapter.py): its given cells'
definitions and its solution cells (reference code, or a catalogue submission's code), then
the test cells, visible and hidden. No training runs here: the checks build their own small inputs.
"""
import contextlib
import io
import re

import pytest
import torch

import solutions
from tests.chapter import HIDDEN_MARKER, Chapter, CheckFailure, checks_module, imports_solutions
from tests.submissions import diversity as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/diversity.py, as the notebook imports it
LocalRuntime, use_runtime = (getattr(checks_module("common"), name)
                             for name in ("LocalRuntime", "use_runtime"))
REF = CHAPTER.namespace()


# ------------------------------------------------------------------ the notebook itself
def test_notebook_has_the_expected_cells():
    assert set(CHAPTER.solutions) == {"relation_scores", "make_heads_identical",
                                      "head_similarity", "ablation_importance", "prune_heads"}
    assert set(CHAPTER.tests) == {"test_relation_scores", "test_make_heads_identical",
                                  "test_head_similarity", "test_ablation_importance",
                                  "test_prune_heads"}
    assert all(HIDDEN_MARKER in src for src in CHAPTER.tests.values())
    assert 10 <= CHAPTER.points <= 20
    # chapter 5 may use the reference package (its release ships it), but the exercises'
    # own functions must not come from it
    setup = "".join(CHAPTER.code_cells[0]["source"])
    for name in CHAPTER.solutions:
        assert not re.search(rf"\b{name}\b", setup), f"the setup cell imports {name}"


def test_reference_cells_pass_every_test():
    assert CHAPTER.run_tests(CHAPTER.namespace()) == dict.fromkeys(CHAPTER.tests)


def test_solutions_package_passes_every_test():
    """The importable reference (solutions/) passes the same visible and hidden tests."""
    ns = CHAPTER.namespace()
    ns.update(relation_scores=solutions.relation_scores,
              make_heads_identical=solutions.make_heads_identical,
              head_similarity=solutions.head_similarity,
              ablation_importance=lambda model, batch: solutions.head_importance(
                  model, batch).ablation,
              prune_heads=solutions.prune_heads)
    assert CHAPTER.run_tests(ns) == dict.fromkeys(CHAPTER.tests)


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
    blank = CHAPTER.blank()
    assert all("NotImplementedError" in code for code in blank.values())
    results = CHAPTER.run_tests(CHAPTER.namespace(blank))
    assert all(message and "not implemented" in message for message in results.values()), results


def test_hard_coded_outputs_fail_hidden_tests():
    """Returning the visible test's expected output passes it and fails the hidden ones."""
    weights = check._attention_maps(3, 2, 6, 6, 0, causal=True).float()
    frozen = REF["relation_scores"](weights)
    cheat = CHAPTER.namespace({"relation_scores": '''
def relation_scores(weights):
    return FROZEN
'''})
    cheat["FROZEN"] = frozen
    assert CHAPTER.run("test_relation_scores", cheat, hidden=False) is None
    assert CHAPTER.run("test_relation_scores", cheat) is not None


# ------------------------------------------------------------------ the catalogue
def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 2
    assert len(catalogue.BUGS) >= 3


# ------------------------------------------------------------------ the checks module
def test_checks_do_not_import_solutions():
    assert not imports_solutions("diversity")


def test_rebinding_allclose_does_not_fool_the_checks():
    ns = CHAPTER.namespace({"head_similarity": '''
import torch

def head_similarity(weights):
    torch.allclose = lambda *a, **k: True
    torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)
    maps = weights.flatten(2)
    return (maps @ maps.transpose(1, 2)).mean(0)
'''})
    saved = torch.allclose, torch.isclose
    try:
        message = CHAPTER.run("test_head_similarity", ns)
    finally:
        torch.allclose, torch.isclose = saved
    assert message and "not normalised" in message


# (the catalogue, tests/submissions/diversity.py, holds the classic mistakes of every exercise)
def _fails(check_call, pattern):
    with pytest.raises(CheckFailure, match=re.compile(pattern, re.S)):
        with contextlib.redirect_stdout(io.StringIO()):
            check_call()


def test_ablation_importance_names_the_gradient_score():
    def gradient_score(model, batch):
        return solutions.head_importance(model, batch).gradient
    _fails(lambda: check.ablation_importance(gradient_score), r"gradient score")


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


# ------------------------------------------------------------------ what the checks build
class _GivenSpy(LocalRuntime):
    """The local runtime, recording what the checks build with given()."""

    def __init__(self):
        self.paths = []

    def given(self, path, args, kwargs):
        self.paths.append(path)
        return super().given(path, args, kwargs)


def _quietly(check_call):
    with contextlib.redirect_stdout(io.StringIO()):
        check_call()


def test_the_ablation_lab_is_built_with_given():
    """fn gets the model and batch that given() built (under the autograder: in the student's
    process), and the batch reads by name, by index and unpacked, like TwoRelationBatch."""
    handed = []

    def importance(model, batch):
        handed.append((model, batch))
        tokens, prev_target, first_target = batch
        assert tokens is batch.tokens is batch[0] and first_target is batch[-1]
        assert len(batch) == 3 and prev_target is batch.prev_target
        return solutions.head_importance(model, batch).ablation

    spy = _GivenSpy()
    with use_runtime(spy):
        _quietly(lambda: check.ablation_importance(importance))
    # (besides the model's state, read where it lives before and after the call: the
    # promise that fn leaves it as it was, common.watch_arguments)
    assert [path for path in spy.paths if not path.startswith("checks.operations:")] == [
        "checks.diversity:_ablation_setup"]
    model, batch = handed[0]
    assert isinstance(model, check.GatedModel) and isinstance(batch, check.Batch)
    assert not isinstance(batch, tuple)  # a tuple would reach the student's process by value


def test_make_heads_identical_holds_the_parameters_with_given():
    spy = _GivenSpy()
    with use_runtime(spy):
        _quietly(lambda: check.make_heads_identical(REF["make_heads_identical"],
                                                    solutions.MultiHeadAttention))
    assert spy.paths == ["torch.nn:ParameterList"]


def test_a_pruned_module_must_own_its_tensors():
    """'returned mha itself' needs every tensor shared; a new module that holds mha's very
    out_proj.bias (a tensor no head owns) is a new module that does not own its tensors
    (common.expect_own_storage): a change to one would reach the other."""
    def shares_out_bias(mha, heads_to_remove):
        new = solutions.prune_heads(mha, heads_to_remove)
        new.out_proj.bias = mha.out_proj.bias
        return new

    _fails(lambda: check.prune_heads(shares_out_bias, solutions.MultiHeadAttention),
           r"returned a module whose `out_proj\.bias` shares its memory with mha's "
           r"`out_proj\.bias`")
    _fails(lambda: check.prune_heads(lambda mha, heads_to_remove: mha,
                                     solutions.MultiHeadAttention), r"returned mha itself")


def test_a_generic_message_names_the_heads_not_rows(monkeypatch):
    """Where no catalogued mistake matches, a parameter's message names the heads whose rows
    (q_proj, k_proj, v_proj) or columns (out_proj) differ, not indices of axis 0. (The repair
    family is switched off here: it would name this mistake by its line, which deleted makes
    the check pass; what is tested is the message it leads when no edit does.)"""
    monkeypatch.setattr(checks_module("common"), "REPAIR_SECONDS", 0.0)
    def rows_not_scaled(mha, heads_to_remove):  # rows k..k+hd of head k, not k*hd..(k+1)*hd
        new = solutions.prune_heads(mha, heads_to_remove)
        keep = [k for k in range(mha.num_heads) if k not in heads_to_remove]
        rows = torch.cat([torch.arange(k, k + mha.head_dim) for k in keep])
        with torch.no_grad():
            new.q_proj.weight.copy_(mha.q_proj.weight[rows])
        return new

    _fails(lambda: check.prune_heads(rows_not_scaled, solutions.MultiHeadAttention),
           r"q_proj\.weight is wrong \(largest error .*only at head 1, 2 of the pruned module "
           r"\(0-based\)")
