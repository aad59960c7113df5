"""Chapter 3's checks (chapters/checks/mha.py), tested without nbgrader.

The notebook's reference code and the `solutions` package must pass every test cell; more
mistakes are checked one by one here. tests/test_catalogue.py grades the catalogue
(tests/submissions/mha.py) with every chapter's.
"""
import re

import pytest
import torch
import torch.nn as nn

import solutions
from tests.chapter import HIDDEN_MARKER, Chapter, CheckFailure
from tests.submissions import mha as catalogue

CHAPTER = Chapter(catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/mha.py, as the notebook imports it


def test_notebook_has_the_expected_cells():
    assert set(CHAPTER.solutions) == {"output_projection_by_heads", "MultiHeadAttention",
                                      "load_from_torch", "count_parameters"}
    assert set(CHAPTER.tests) == {"test_output_projection_by_heads", "test_mha_structure",
                                  "test_mha_forward", "test_load_from_torch",
                                  "test_count_parameters"}
    for source in CHAPTER.tests.values():
        assert HIDDEN_MARKER in source


@pytest.mark.parametrize("test_id", sorted(CHAPTER.tests))
def test_reference_passes(test_id):
    assert CHAPTER.run(test_id, CHAPTER.namespace()) is None


# ------------------------------------------------------------------ the solutions package
def _solutions_projection(heads, W_O, b_O=None):
    output = solutions.merge_heads(heads) @ W_O
    return output if b_O is None else output + b_O


def _solutions_loader(ours, torch_mha):
    new = solutions.MultiHeadAttention.from_torch(torch_mha)
    with torch.no_grad():
        for name in check.PROJECTIONS:
            src, dst = getattr(new, name), getattr(ours, name)
            dst.weight.copy_(src.weight)
            if src.bias is not None:
                dst.bias.copy_(src.bias)
    return ours


def test_solutions_package_passes(capsys):
    ns = {"check": check, "torch": torch,
          "output_projection_by_heads": _solutions_projection,
          "MultiHeadAttention": solutions.MultiHeadAttention,
          "load_from_torch": _solutions_loader,
          "count_parameters": solutions.count_parameters}
    for test_id in CHAPTER.tests:
        assert CHAPTER.run(test_id, ns) is None, test_id
    assert capsys.readouterr().out.count("\u2714") >= 2 * len(CHAPTER.tests)


def test_solutions_head_weights_match_W_O_blocks():
    """The chapter's W_O^i (row blocks of out_proj.weight.T) are solutions' HeadWeights.output."""
    mha = solutions.MultiHeadAttention(12, 3)
    hd = mha.head_dim
    for i, block in enumerate(mha.head_weights().output):
        assert torch.equal(block, mha.out_proj.weight.T[i * hd:(i + 1) * hd])


# ------------------------------------------------------------------ the catalogue
def test_catalogue_size():
    assert len(catalogue.CORRECT) >= 3 and len(catalogue.BUGS) >= 3


# ------------------------------------------------------------------ more mistakes, one by one
def _fails(check_call, pattern):
    with pytest.raises(CheckFailure, match=re.compile(pattern, re.S)):
        check_call()


REF = CHAPTER.namespace()


def _ns_with(cell, code):
    return CHAPTER.namespace({cell: code})


# (the catalogue, tests/submissions/mha.py, holds the classic mistakes; these are the rest)
@pytest.mark.parametrize("body, pattern", [
    ("heads.mul_(2); return merge_heads(heads) @ W_O + b_O",
     r"changed its argument `heads` in place"),
    ("raise NotImplementedError()", r"not implemented"),
])
def test_projection_diagnoses(body, pattern):
    ns = _ns_with("output_projection_by_heads",
                  f"def output_projection_by_heads(heads, W_O, b_O=None):\n    {body}\n")
    _fails(lambda: check.output_projection_by_heads(ns["output_projection_by_heads"]), pattern)


def test_projection_rejects_hard_coded_output():
    captured = {}

    def cheat(heads, W_O, b_O=None):
        if "out" not in captured:
            captured["out"] = solutions.merge_heads(heads) @ W_O + b_O
        return captured["out"]

    check.output_projection_by_heads(cheat)
    _fails(lambda: check.output_projection_by_heads(cheat, seed=1234), r"wrong|shape")


def _mha_class(forward_body=None, init_extra="", init=None):
    base = catalogue._INIT if init is None else init
    forward = forward_body or catalogue._mha_forward_with()
    return "class MultiHeadAttention(nn.Module):\n" + base + init_extra + "\n" + forward


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(attend="heads, weights = scaled_dot_product_attention(q, k, v, mask)\n"
                 "        weights = weights.transpose(-2, -1).softmax(-1).transpose(-2, -1)"),
     r"."),  # any failure: weights changed after attention
])
def test_forward_diagnoses(kwargs, pattern):
    ns = _ns_with("MultiHeadAttention", _mha_class(catalogue._mha_forward_with(**kwargs)))
    _fails(lambda: check.multi_head_attention(ns["MultiHeadAttention"]), pattern)


COUNT = CHAPTER.solutions["count_parameters"]


@pytest.mark.parametrize("old, new, pattern", [
    ("    return weights + biases\n", "    return float(weights + biases) + 0.5\n",
     r"returned"),
])
def test_count_diagnoses(old, new, pattern):
    assert old in COUNT, old
    ns = _ns_with("count_parameters", COUNT.replace(old, new))
    _fails(lambda: check.count_parameters(ns["count_parameters"]), pattern)


def test_count_reference_is_nn_multihead_attention():
    for d, h, kw in check._count_configs(0) + check._count_configs(1234):
        expected = solutions.count_parameters(d, h, **kw)
        assert check._count_reference(d, h, **kw) == expected
        if (kw.get("query_size") or d) == d:
            m = nn.MultiheadAttention(d, h, bias=kw.get("bias", True), kdim=kw.get("key_size"),
                                      vdim=kw.get("value_size"))
            assert sum(p.numel() for p in m.parameters()) == expected


def test_a_mistake_outside_the_catalogue_is_located():
    """Weights wrong in one head only: no catalogued bug matches, and the message says which
    head and which keys (the locality family of checks/diagnose.py)."""
    forward = catalogue._mha_forward_with(
        finish="weights = torch.cat([weights[:, :1], weights[:, 1:2].flip(-1), weights[:, 2:]], 1)\n"
               "        return self.out_proj(merge_heads(heads)), weights")
    ns = _ns_with("MultiHeadAttention", _mha_class(forward))
    _fails(lambda: check.multi_head_attention(ns["MultiHeadAttention"]),
           r"is wrong: it is right everywhere except at index 1 of num_heads; indices 0, 1, 3, "
           r"4 of Lk \(40 of 200 entries off\)")  # (flip keeps the middle key)


# ------------------------------------------------------------------ the documented kinds
@pytest.mark.parametrize("returned, fails", [
    ("float(n)", True),                      # a float of equal value: not the documented int
    ("torch.tensor(n)", True),               # a 0-d tensor
    ("n > 0", True),                         # a bool is no count
    ("numpy.int64(n)", False),               # numpy's integers are ints (numbers.Integral)
    ("n", False),
])
def test_count_parameters_returns_the_documented_int(returned, fails):
    code = "import numpy\n" + COUNT.replace("    return weights + biases\n",
                                            "    n = weights + biases\n"
                                            f"    return {returned}\n")
    def run():
        check.count_parameters(_ns_with("count_parameters", code)["count_parameters"])
    if fails:
        _fails(run, r"count_parameters\(512, 8\) returned a \w+.* where the exercise documents "
                    r"an int")
    else:
        run()


def test_forward_is_called_with_the_documented_mask_none():
    """forward(query, key, value, mask=None): the check passes mask=None (chapter 4 passes
    masks; the catalogue's forward_without_mask_parameter fails on it) and leaves it to its
    default (a default is a promise too), nothing else."""
    forward = catalogue._mha_forward_with().replace(
        "def forward(self, query, key, value, mask=None):",
        "def forward(self, query, key, value, **options):\n"
        "        CALLS.append(options)\n"
        "        assert options in ({'mask': None}, {}), options")
    forward = forward.replace("(q, k, v, mask)", "(q, k, v)")
    ns = _ns_with("MultiHeadAttention", _mha_class(forward))
    calls = ns["MultiHeadAttention"].forward.__globals__.setdefault("CALLS", [])
    check.multi_head_attention(ns["MultiHeadAttention"])
    assert {'mask': None} in calls and {} in calls, calls


# ------------------------------------------------------------------ the initialisation
_HAND_WRITTEN_INIT = catalogue._INIT.replace(
    '''        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if bias:
                nn.init.zeros_(proj.bias)
''', '''        with torch.no_grad():   # xavier_uniform_ by hand, the biases zeroed in place
            for proj in (self.out_proj, self.v_proj, self.k_proj, self.q_proj):
                out_features, in_features = proj.weight.shape
                bound = math.sqrt(6 / (in_features + out_features))
                proj.weight.uniform_(-bound, bound)
                if proj.bias is not None:
                    proj.bias.data.mul_(0)
''')
assert _HAND_WRITTEN_INIT != catalogue._INIT   # (the replaced loop is the catalogue's)


@pytest.mark.parametrize("init", [catalogue._INIT, _HAND_WRITTEN_INIT])
def test_the_initialisation_check_passes_correct_layers_whatever_the_seed(init, capsys):
    """The reference start and one written by hand (its own bound, another order of draws)
    pass on every size the test cells use, for 20 seeds each: the statistics' tolerance (7
    standard errors) is far from a correct layer's spread."""
    cls = _ns_with("MultiHeadAttention", _mha_class(init=init))["MultiHeadAttention"]
    for seed in range(20):
        check.multi_head_attention_structure(cls, seed=seed)
        check.multi_head_attention_structure(cls, d_model=9, num_heads=1, seed=seed)
        check.multi_head_attention_structure(cls, d_model=24, num_heads=6, query_size=5,
                                             key_size=7, value_size=9, bias=False, seed=seed)


def test_the_initialisation_words_name_the_initialiser_a_weight_fits():
    """_like names the standard initialisers whose distribution fits, and none that does not:
    a normal draw of xavier_normal_'s spread, nn.Linear's default, and zeros."""
    torch.manual_seed(0)
    weight = torch.empty(16, 16)
    found = check._initialisers(16, 16, "d_model", stacked=False)
    nn.init.xavier_normal_(weight)
    assert "nn.init.xavier_normal_" in check._like(weight, found)
    assert "normal with standard deviation" in check._looks(weight)
    weight = nn.Linear(16, 16).weight.detach()
    assert check._like(weight, found).startswith(", which is what nn.Linear's default")
    assert "xavier_normal_" not in check._like(weight, found)
    assert check._like(torch.zeros(16, 16), found) == ""
    assert check._looks(torch.zeros(16, 16)) == "all equal to 0"


def test_the_initialisation_check_draws_after_the_graders_seed():
    """The layer is built right after torch.manual_seed(seed) (the grader's), so one seed
    gives one set of initial weights, and the student's random stream is left as it was."""
    drawn = []

    class Recording(nn.Module):
        def __init__(self, d_model, num_heads, **kwargs):
            super().__init__()
            drawn.append(torch.rand(1).item())
            raise ValueError("stop here")

    before = torch.random.get_rng_state()
    for _ in range(2):
        with pytest.raises(CheckFailure):
            check.multi_head_attention_structure(Recording, seed=3)
    assert drawn[0] == drawn[1]
    assert torch.equal(torch.random.get_rng_state(), before)
