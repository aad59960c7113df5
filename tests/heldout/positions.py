"""Held-out set of chapter 7 (positions): the entries of chapter 6's held-out module whose cells
moved to chapter 7 when chapter 6 was split in two (issue 22), moved mechanically (their
cells and test names unchanged), and mistakes in the sinusoidal exercise written before its
check. The rules of tests/heldout/__init__.py hold: no check is tuned on them.
"""
from . import Bug, edit, reference

NOTEBOOK = "07_positions"

_EQUIVARIANCE = reference(NOTEBOOK, "equivariance_gap")
_ROTARY = reference(NOTEBOOK, "rotary")
_SINUSOIDAL = reference(NOTEBOOK, "sinusoidal")
_SINUSOIDAL_TESTS = ["test_sinusoidal_positions"]

CORRECT = {
    # repeat by gathering head i // G; counts written as products; a cache that starts from
    # empty tensors' shapes; the decoding mask as the complement of an upper triangle; the
    # gap through a vector norm of order inf.
    "gather_and_norms": {
        "equivariance_gap": '''
def equivariance_gap(layer, x, perm):
    with torch.no_grad():
        diff = layer(x.index_select(1, perm)) - layer(x).index_select(1, perm)
    return float(torch.linalg.vector_norm(diff, ord=float("inf")))
''',
    },
    # rotation as a 2x2 matrix per pair, applied with einsum; the decoding mask by ~triu.
    "rotation_matrices": {
        "rotary": edit(_ROTARY, """    half = x.shape[-1] // 2
    cos, sin = (t.to(x.dtype) for t in rotary_angles(positions, x.shape[-1], base))  # (L, half)
    x1, x2 = x[..., :half], x[..., half:]                                   # (..., L, half) x 2
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)    # (..., L, head_dim)
""", """    half = x.shape[-1] // 2
    cos, sin = (t.to(x.dtype) for t in rotary_angles(positions, x.shape[-1], base))
    rotation = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    pairs = torch.stack([x[..., :half], x[..., half:]], dim=-1)          # (..., L, half, 2)
    turned = torch.einsum("lhij,...lhj->...lhi", rotation, pairs)
    return torch.cat([turned[..., 0], turned[..., 1]], dim=-1)
"""),
    },
}

BUGS = {

    # --- equivariance_gap
    "equivariance_without_abs": Bug(
        cells={"equivariance_gap": edit(_EQUIVARIANCE, ".abs().max().item()", ".max().item()")},
        fails=["test_equivariance_gap"],
        diagnosis=r"(?i)abs|absolute|signed|negative",
        notes="on every test's inputs the signed maximum equals the largest "
              "absolute difference, rounding aside"),
    "equivariance_permutes_batch": Bug(
        cells={"equivariance_gap": edit(edit(_EQUIVARIANCE, "permuted_first = layer(x[:, perm])", "permuted_first = layer(x[perm])"),
                                        "permuted_after = layer(x)[:, perm]", "permuted_after = layer(x)[perm]")},
        fails=["test_equivariance_gap"],
        diagnosis=r"(?i)batch axis|axis 0|dimension 0.{0,40}batch|x\[:, perm\]|perm.{0,40}(positions|sequence|axis 1)"),

    # --- rotary
    # The two halves written back in the other order.
    "rotary_halves_swapped": Bug(
        cells={"rotary": edit(_ROTARY, "torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
                              "torch.cat([x1 * sin + x2 * cos, x1 * cos - x2 * sin], dim=-1)")},
        # the same swap of q's and k's halves keeps every q . k: attention is unchanged
        fails=["test_apply_rotary"],
        diagnosis=r"(?i)halves.{0,40}(swapped|order)|(swapped|order).{0,40}halves|other pairing|written back"),
    # (cos, sin) unpacked as (sin, cos).
    "rotary_cos_sin_swapped": Bug(
        cells={"rotary": edit(_ROTARY, "    cos, sin = (t.to(x.dtype)", "    sin, cos = (t.to(x.dtype)")},
        fails=["test_apply_rotary", "test_rotary_decoding"],
        diagnosis=r"(?i)cos.{0,40}sin.{0,40}swapped|sin, cos|swapped cos|90 degrees|pi ?/ ?2"),
    # the sinusoidal table's mistakes, written before its check (issue 22)
    "sinusoidal_halves_not_interleaved": Bug(
        cells={"sinusoidal": edit(_SINUSOIDAL,
                                  "table = torch.stack([angles.sin(), angles.cos()], dim=-1)",
                                  "table = torch.cat([angles.sin(), angles.cos()], dim=-1)")},
        fails=_SINUSOIDAL_TESTS,
        diagnosis=r"(?i)interleav|layout|order|halves|even .*odd"),
    "sinusoidal_positions_from_one": Bug(
        cells={"sinusoidal": edit(_SINUSOIDAL,
                                  "positions = torch.arange(num_positions, dtype=torch.float64)",
                                  "positions = torch.arange(1, num_positions + 1, "
                                  "dtype=torch.float64)")},
        fails=_SINUSOIDAL_TESTS,
        diagnosis=r"(?i)shift|off by one|position 0|start at 0|0 \.\. num_positions"),
    "sinusoidal_exponent_positive": Bug(
        cells={"sinusoidal": edit(_SINUSOIDAL, "base ** (-2 * pair / d_model)",
                                  "base ** (2 * pair / d_model)")},
        fails=_SINUSOIDAL_TESTS,
        diagnosis=r"(?i)sign|negative|frequenc"),
    "sinusoidal_returns_float64": Bug(
        cells={"sinusoidal": edit(_SINUSOIDAL, ".reshape(num_positions, d_model).float()",
                                  ".reshape(num_positions, d_model)")},
        fails=_SINUSOIDAL_TESTS,
        diagnosis=r"(?i)float64.*float32|float32.*float64|dtype"),
    "sinusoidal_one_frequency_per_feature": Bug(
        cells={"sinusoidal": edit(_SINUSOIDAL, """    pair = torch.arange(d_model // 2, dtype=torch.float64)                    # (P,)
    angles = positions[:, None] * base ** (-2 * pair / d_model)               # (L, P)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)                 # (L, P, 2)
""", """    feature = torch.arange(d_model, dtype=torch.float64)
    angles = positions[:, None] * base ** (-feature / d_model)                # (L, D)
    table = torch.where(feature % 2 == 0, angles.sin(), angles.cos())
""")},
        fails=_SINUSOIDAL_TESTS,
        diagnosis=r"(?i)pair|frequenc|2i|odd feature"),
}
