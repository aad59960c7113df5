"""forbids.verdicts on a computed attribute name: an honest student's per-head weights
(getattr(self, f"w_{i}"), setattr(self, f"w_{i}", ...)) keep their points; a name that
could be one the grader watches (torch's functions, the reaching attributes, a private or
dunder name) still costs the tests of every forbid, as before."""
import pytest

from autograde import forbids
from chapters.checks.mha import FORBIDS

PER_HEAD = '''
import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        for i in range(num_heads):
            setattr(self, f"w_{i}", nn.Linear(d_model, d_model // num_heads))
        for name in "qkv":
            setattr(self, name + "_proj", nn.Linear(d_model, d_model))

    def forward(self, x, i):
        head = getattr(self, f"w_{i}")(x)           # (B, L, head_dim)
        return head + getattr(self, "q" + "_proj")(x)[..., :head.shape[-1]]
'''


def _steps(code):
    """One solution step, as autograde.notebook.plan gives them."""
    return [("cell MultiHeadAttention, line 1", code, True)]


def test_per_head_names_keep_their_points_and_raise_no_flag():
    steps = _steps(PER_HEAD)
    assert forbids.verdicts(steps, FORBIDS) == {}
    assert forbids.flags(steps) == []


@pytest.mark.parametrize("name", [
    'f"multi_head_{x}"',                 # a prefix of the forbidden function's name
    '"multi_head_attention" + "_forward"',
    'f"{x}Attention"',                   # a suffix of nn.MultiheadAttention
    'f"layer{i}"',                       # torch.layer_norm starts so
    'f"__{x}__"', 'f"_{x}"',             # private and dunder names
    'f"f_{x}"',                          # a frame's f_globals
    'x',                                 # nothing known at all
])
def test_a_name_that_could_be_watched_still_costs_every_forbid(name):
    for call in (f"getattr(torch.nn.functional, {name})",
                 f"setattr(torch.nn.functional, {name}, None)"):
        code = f"import torch\n\n\ndef helper(x, i):\n    return {call}\n"
        lost = forbids.verdicts(_steps(code), FORBIDS)
        assert set(lost) == {"test_mha_forward"}, (call, lost)
        assert forbids.flags(_steps(code)), call


def test_a_constant_watched_name_in_setattr_is_still_a_patch():
    code = "import torch\nsetattr(torch.nn.functional, 'softmax', None)\n"
    assert forbids.flags(_steps(code))


LOOP = '''
import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model))
'''


def test_a_loop_over_constant_names_keeps_its_points():
    """setattr with a loop variable over literal names (the capstone's honest variant) is
    those names, none watched: no forbid, no flag."""
    assert forbids.verdicts(_steps(LOOP), FORBIDS) == {}
    assert forbids.flags(_steps(LOOP)) == []


@pytest.mark.parametrize("change", [
    ('("q_proj", "k_proj", "v_proj", "out_proj")', '("q_proj", "__class__")'),   # a dunder
    ('("q_proj", "k_proj", "v_proj", "out_proj")', '("q_proj", "softmax")'),     # watched
    ('            setattr(', '            name = "__class__"\n            setattr('),  # rebound
    ('("q_proj", "k_proj", "v_proj", "out_proj")', 'names'),                     # not literal
    ('    def __init__', '    global name\n\n    def __init__'),                 # declared
])
def test_a_loop_whose_names_could_be_watched_still_costs_every_forbid(change):
    code = LOOP.replace(*change)
    assert code != LOOP
    assert forbids.flags(_steps(code)), change
