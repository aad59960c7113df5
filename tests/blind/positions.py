"""Blind set, chapter 7 (positions): mistakes written from the exercise text and the reference
solutions alone, by a tester who never read the checks or their messages."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "07_positions"

_EG = reference(NOTEBOOK, "equivariance_gap")
_SIN = reference(NOTEBOOK, "sinusoidal")
_ROT = reference(NOTEBOOK, "rotary")

CORRECT = {
    # the gap with torch.amax; the table filled by strided assignment into an empty tensor
    "amax_and_strided": {
        "equivariance_gap": '''
@torch.no_grad()
def equivariance_gap(layer, x, perm):
    """max |layer(x[:, perm]) - layer(x)[:, perm]|, a float."""
    out = layer(x)
    return float(torch.amax(torch.abs(layer(x[:, perm]) - out[:, perm])))
''',
        "sinusoidal": '''
def sinusoidal_positions(num_positions, d_model, base=10000.0):
    """(num_positions, d_model) float32: sin at even features, cos at odd ones."""
    p = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)       # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                # (P,)
    angles = p / base ** (two_i / d_model)                                  # (L, P)
    table = torch.empty(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.to(torch.float32)
''',
    },
    # rotary as x * cos + rotate_half(x) * sin with the angles doubled to head_dim; the
    # positions read from the cache's length before the append
    "rotate_half": {
        "rotary": '''
def apply_rotary(x, positions, base=10000.0):
    """x (..., L, head_dim), positions (L,) -> same shape and dtype, pairs (i, i + half) turned."""
    cos, sin = rotary_angles(positions, x.shape[-1], base)      # (L, half) each, float64
    cos = torch.cat([cos, cos], dim=-1).to(x.dtype)             # (L, head_dim)
    sin = torch.cat([sin, sin], dim=-1).to(x.dtype)
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated_half * sin


def rotary_cached_attention(attn, x_new, cache, base=10000.0):
    """cached_attention with rotary positions on the queries and the new keys."""
    past = len(cache)
    L_new = x_new.shape[1]
    q, k, v = project_heads(attn, x_new)
    positions = past + torch.arange(L_new, device=x_new.device)
    q = apply_rotary(q, positions, base)
    k = apply_rotary(k, positions, base)
    keys, values = cache.append(k, v)
    mask = decoding_causal_mask(L_new, past + L_new, device=x_new.device)
    return attend_heads(attn, q, keys, values, mask)
''',
    },
}

BUGS = {
    # computes the angles in float32, losing digits for positions in the thousands
    "sin_angles_float32": Bug(
        cells={"sinusoidal": edit(edit(_SIN, "positions = torch.arange(num_positions, dtype=torch.float64)", "positions = torch.arange(num_positions, dtype=torch.float32)"),
                                  "pair = torch.arange(d_model // 2, dtype=torch.float64)", "pair = torch.arange(d_model // 2, dtype=torch.float32)")},
        fails=["test_sinusoidal_positions"],
        diagnosis=r"(?i)float64|double|precision|round\w* (once|at the end)|digits"),
    # rotates neighbouring features (2i, 2i+1) together instead of feature i with i + head_dim/2
    "rot_adjacent_pairs": Bug(
        cells={"rotary": edit(edit(_ROT, "x1, x2 = x[..., :half], x[..., half:]", "x1, x2 = x[..., 0::2], x[..., 1::2]"),
                              "return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                              "return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)")},
        fails=["test_apply_rotary", "test_rotary_decoding"],
        diagnosis=r"(?i)i ?\+ ?(head_dim|d_k|d)/ ?2|i ?\+ ?half|halves|2i, ?2i ?\+ ?1|adjacent|neighbou?r|interleav|pairing|paired|which features"),
    # turns every pair by minus its angle (the sin terms' signs swapped)
    "rot_wrong_direction": Bug(
        cells={"rotary": edit(_ROT, "[x1 * cos - x2 * sin, x1 * sin + x2 * cos]", "[x1 * cos + x2 * sin, -x1 * sin + x2 * cos]")},
        fails=["test_apply_rotary", "test_rotary_decoding"],
        diagnosis=r"(?i)\bsign|direction|clockwise|negative angle|opposite|(backwards|the other way)|minus (the )?angle|-\s*p\s*θ|-θ"),
    # numbers the new tokens from 0 instead of from len(cache)
    "rcd_positions_from_zero": Bug(
        cells={"rotary": edit(_ROT, "torch.arange(start, start + x_new.shape[1], device=x_new.device)", "torch.arange(x_new.shape[1], device=x_new.device)")},
        fails=["test_rotary_decoding"],
        diagnosis=r"(?i)len\(cache\)|start\w* (at|from) (0|zero)|cache'?s? length|length of the cache|already cached|offset|positions? of the new (tokens|positions)"),
    # rotates the keys after the append: every cached key is turned again by the new positions
    "rcd_rotate_after_append": Bug(
        cells={"rotary": edit(edit(_ROT, "q, k = apply_rotary(q, positions, base), apply_rotary(k, positions, base)\n    k, v = cache.append(k, v)",
                                   "k, v = cache.append(k, v)\n    q, k = apply_rotary(q, positions, base), apply_rotary(k, positions, base)"),
                              "# (B, g, T, hd), keys rotated once", "")},
        fails=["test_rotary_decoding"],
        diagnosis=r"(?i)rotat\w*.{0,40}(once|twice|again|cached keys|whole cache|all (the )?keys)|before (they go into|the append|appending|caching)|after (the )?append"),
    # ignores the positions argument and rotates rows by 0 .. L-1
    "rot_positions_ignored": Bug(
        cells={"rotary": edit(_ROT, "rotary_angles(positions, x.shape[-1], base)", "rotary_angles(torch.arange(x.shape[-2], device=x.device), x.shape[-1], base)")},
        fails=["test_apply_rotary", "test_rotary_decoding"],
        diagnosis=r"(?i)positions? (argument|given|passed|tensor)|ignor\w* (the )?positions|\bstart\b|arange|0 ?\.\. ?L|offset"),
    # compares the layer's output for the permuted tokens with the permuted input
    "eg_compare_to_input": Bug(
        cells={"equivariance_gap": edit(_EG, "permuted_after = layer(x)[:, perm]", "permuted_after = x[:, perm]")},
        fails=["test_equivariance_gap"],
        diagnosis=r"(?i)layer\(x\)|output of the layer|layer'?s? output|compar\w* .{0,30}input|(raw|the) input|permuted input"),
    # squares the differences instead of taking their absolute value
    "eg_squared": Bug(
        cells={"equivariance_gap": edit(_EG, "(permuted_first - permuted_after).abs().max().item()", "((permuted_first - permuted_after) ** 2).max().item()")},
        fails=["test_equivariance_gap"],
        diagnosis=r"(?i)squar|absolute|\babs"),
    # attends without the decoding mask: the prompt's positions see later ones
    "rcd_no_mask": Bug(
        cells={"rotary": edit(edit(_ROT, "    mask = decoding_causal_mask(q.shape[-2], k.shape[-2], device=x_new.device)\n", ""),
                              "return attend_heads(attn, q, k, v, mask)", "return attend_heads(attn, q, k, v)")},
        fails=["test_rotary_decoding"],
        diagnosis=r"(?i)no mask|without (a |the )?(causal )?mask|mask (is )?missing|forg\w* the mask|decoding_causal_mask|future|later (positions|keys|tokens)|peek"),
    # forgets to divide the exponent by d_model: omega_i = base ** (-2i)
    "sin_exponent_not_scaled": Bug(
        cells={"sinusoidal": edit(_SIN, "base ** (-2 * pair / d_model)", "base ** (-2 * pair)")},
        fails=["test_sinusoidal_positions"],
        diagnosis=r"(?i)frequenc|/ ?d_model|exponent|ω|omega|wavelength|2i ?/ ?d"),
    # measures the gap on the first example of the batch only
    "eg_first_example_only": Bug(
        cells={"equivariance_gap": edit(_EG, "(permuted_first - permuted_after).abs().max().item()", "(permuted_first[0] - permuted_after[0]).abs().max().item()")},
        fails=["test_equivariance_gap"],
        diagnosis=r"(?i)(every|all|each) (example|sequence)|whole batch|first example|example 0|only one (example|sequence)|other examples"),
    # rounds the table to float16 instead of float32
    "sin_returns_half": Bug(
        cells={"sinusoidal": edit(_SIN, "return table.reshape(num_positions, d_model).float()", "return table.reshape(num_positions, d_model).half()")},
        fails=["test_sinusoidal_positions"],
        diagnosis=r"(?i)dtype|float16|\bhalf\b"),
}
