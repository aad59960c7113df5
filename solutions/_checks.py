"""Input checks shared by every public function: each names the problem and the shapes.

Their messages, like every error this package raises, are in English in every edition, as
PyTorch's are: from chapter 5 on the student's code calls this package as it calls PyTorch
(`from solutions import ...`; autograde/course.py's EXTRA_SHIPPED), so a refusal reaches the
student as the exception of their own call, in their Jupyter's traceback (where no language
is known: this package imports nothing of the checks) and in a check's or the grader's
feedback, which quotes it verbatim inside its own sentence in the student's language
(chapters/checks/diagnose.py's `raised_plain`), as it quotes PyTorch's: the same words in
both places, to be matched and searched. The checks and the grader never import this
package: they meet it only as what the student's code calls or passes them (chapter 5's
checks build the MultiHeadAttention class the student passes), in the student's process,
whose errors they quote so (tests/test_check_messages_zh.py)."""
import os

import torch


def environment_count(variable):
    """The positive integer in the environment variable `variable`, or None when it is unset
    or empty; raises ValueError naming the variable for anything else. The switches that
    shorten a chapter's long runs for the tests read their value here (README,
    "Quick start")."""
    value = os.environ.get(variable, "")
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{variable} must be a positive integer, got {value!r}")
    return int(value)


def check_tensor(x, name, min_rank=None, rank=None):
    """Require a floating-point tensor of the given rank; return it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if rank is not None and x.dim() != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {tuple(x.shape)} (rank {x.dim()})")
    if min_rank is not None and x.dim() < min_rank:
        raise ValueError(
            f"{name} must have rank >= {min_rank}, got shape {tuple(x.shape)} (rank {x.dim()})"
        )
    return x


def check_same_device_and_dtype(**tensors):
    """Require all named tensors to share one device and one dtype."""
    items = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first.device}: "
                "move all inputs to one device"
            )
        if t.dtype != first.dtype:
            raise TypeError(
                f"{name} has dtype {t.dtype} but {first_name} has dtype {first.dtype}: "
                "use one dtype for all inputs"
            )


def check_mask(mask, scores_shape, device):
    """Require a boolean mask broadcastable to `scores_shape` (..., Lq, Lk) on `device`."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "for an nn.MultiheadAttention-style mask use solutions.from_torch_attn_mask"
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but the inputs are on {device}")
    scores_shape = tuple(scores_shape)
    try:
        broadcast = torch.broadcast_shapes(tuple(mask.shape), scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to the attention scores' "
            f"shape {scores_shape} (..., Lq, Lk)"
        )
    return mask


def check_positive_int(value, name, optional=False):
    """Require a positive int (or None when `optional`); return it."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int{' or None' if optional else ''}, got {value!r}")
    return value


def check_heads(d_model, num_heads):
    """Require positive ints with num_heads dividing d_model; return head_dim."""
    for name, v in (("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}: "
            f"head_dim = d_model / num_heads = {d_model / num_heads:g} must be a whole number"
        )
    return d_model // num_heads
