"""No test awards points to a degenerate answer: a constant (zero) output, or an input
echoed back, is trivially invariant, so the invariance tests first require an output that
follows the values (a wrong but real attention still gets them: they test the mask only)."""
import sys

import pytest
import torch

from autograde import course

if str(course.CHAPTERS) not in sys.path:
    sys.path.insert(0, str(course.CHAPTERS))

from checks import masks  # noqa: E402
from checks.common import CheckFailure  # noqa: E402


def _zeros(query, key, value, mask=None):
    weights = torch.zeros(*query.shape[:-1], key.shape[-2], dtype=query.dtype)
    return torch.zeros_like(value[..., :query.shape[-2], :]), weights


def _echo_value(query, key, value, mask=None):
    weights = torch.eye(query.shape[-2], key.shape[-2], dtype=query.dtype)
    return value.clone(), weights.expand(*query.shape[:-1], key.shape[-2])


def _echo_query(query, key, value, mask=None):
    return query.clone(), _echo_value(query, key, value)[1]


@pytest.mark.parametrize("degenerate, message", [
    (_zeros, r"does not change when the values change"),
    (_echo_value, r"the output is the value itself"),
    (_echo_query, r"the output is the query itself")], ids=["zeros", "value", "query"])
def test_invariances_refuse_a_degenerate_attention(degenerate, message):
    with pytest.raises(CheckFailure, match=message):
        masks.invariances(degenerate)
    with pytest.raises(CheckFailure, match=message):
        masks.invariances(degenerate, seed=1234, batch=4, num_heads=3, L=9, d_k=4)


def test_invariances_pass_the_reference():
    from solutions.attention import scaled_dot_product_attention
    masks.invariances(scaled_dot_product_attention)
    masks.invariances(scaled_dot_product_attention, seed=1234, batch=4, num_heads=3, L=9,
                      d_k=4, dtype=torch.float64)
