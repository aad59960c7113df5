"""No test awards points to a degenerate answer: a constant (zero) output, or an input
echoed back, is trivially invariant, so the invariance tests first require an output that
follows the values (a wrong but real attention still gets them: they test the mask only).

Then every chapter: each answer of each exercise, made degenerate in several ways, is graded
by the grader (autograde.engine, the student's code in the sandbox, hidden tests included)
on the test cells that name it; none may award it a point but the commented ALLOWED ones.
"""
import ast
import json
import re
from dataclasses import dataclass, replace

import pytest
import torch

from autograde import course
from autograde.engine import Assignment, Grader, trusted_namespace
from autograde.remote import Zygote
from autograde.notebook import parse
from tests.chapter import CheckFailure, checks_module
from tests.submissions import fill_submission, reference_cells

masks = checks_module("masks")


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


# ---------------------------------------------------------------------------------------
# Every chapter: degenerate answers graded by the grader
# ---------------------------------------------------------------------------------------
# A degenerate answer computes nothing from its inputs: it returns zeros, ones, 0.5 or a
# uniform distribution of the right shape, one of its inputs echoed back (reshaped to the
# right shape when it has another one: a value that follows the input, wrongly), leaves a
# module as it was given, returns a constant loss without training, or refuses every input.
# Each is a change of one answer (one function, or one class's method) of the reference
# solution, written in the cell the student fills: the reference computes the shape, and
# the degenerate value replaces what it returned. Each is graded alone (the other answers
# are the reference's), on the test cells that name it; none may give it a point, except
# the ALLOWED ones, each for something else the answer still does right. (One notebook per
# degenerate answer, not one per chapter: a test cell failing on another degenerate answer
# of the same notebook would hide a point this one earns. About 0.3 s each.)

# The code that turns an answer degenerate; it runs in the student's process, before the
# rebinding that each degenerate answer appends to its cell.
HELPERS = '''
def _degenerate_tensor(result, kind, source):
    """A tensor of result's shape, dtype and device that does not follow the inputs
    (kind zeros, ones, half, uniform, eye), or `source` (an input) echoed into it."""
    if kind == "zeros":
        return torch.zeros_like(result)
    if kind == "ones":
        return torch.ones_like(result)
    if kind == "half":
        return torch.full_like(result, 0.5)
    if kind == "uniform":  # each row a uniform distribution over the last axis
        return torch.ones_like(result) / max(result.shape[-1], 1)
    if kind == "eye":
        eye = torch.eye(result.shape[-2], result.shape[-1], device=result.device)
        return eye.to(result.dtype).expand(result.shape).clone()
    if not isinstance(source, torch.Tensor):
        return torch.full_like(result, source if isinstance(source, (int, float)) else 0)
    flat = source.reshape(-1).to(result.device)
    if flat.numel() == 0 or result.numel() == 0:
        return torch.zeros_like(result)
    repeats = -(-result.numel() // flat.numel())
    return flat.repeat(repeats)[:result.numel()].view(result.shape).to(result.dtype)


def _degenerate_value(result, kind, source):
    """`result` (what the reference returned) made degenerate, container by container."""
    if isinstance(result, tuple):
        items = [_degenerate_value(item, kind, source) for item in result]
        return type(result)(*items) if hasattr(type(result), "_fields") else tuple(items)
    if isinstance(result, torch.Tensor):
        return _degenerate_tensor(result, kind, source)
    if isinstance(result, torch.nn.Module):  # every parameter the same constant
        with torch.no_grad():
            for parameter in result.parameters():
                parameter.fill_({"zeros": 0.0, "ones": 1.0}.get(kind, 0.5))
        return result
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        constants = {"zeros": 0, "ones": 1, "half": 0.5}
        value = constants.get(kind, source if isinstance(source, (int, float)) else 0)
        return type(result)(value)
    return result


def _degenerate_item(result, kind, source, item):
    """`result` with only its tuple item `item` made degenerate, the others kept."""
    if not isinstance(result, tuple) or item >= len(result):
        return _degenerate_value(result, kind, source)
    items = list(result)
    items[item] = _degenerate_value(items[item], kind, source)
    return type(result)(*items) if hasattr(type(result), "_fields") else tuple(items)


def _degenerate_answer(kind, reference, args, kwargs):
    """What the degenerate answer `kind` returns for a call (args, kwargs); `reference`:
    the reference answer, called only for the shape of what it returns (where it refuses
    its input, the degenerate answer returns a scalar zero or the echoed input instead)."""
    if kind == "refuse":  # refuses every input, in words that name all of it
        given = [tuple(arg.shape) if isinstance(arg, torch.Tensor) else arg
                 for arg in list(args) + list(kwargs.values())]
        raise ValueError(f"d_model and num_heads do not fit: {given}")
    if kind.startswith("const:"):  # computes nothing, changes nothing
        return float(kind.split(":")[1])
    if kind.startswith("called:"):  # train_step: runs the model, updates nothing
        model, batch = args[0], args[2]
        model.train()
        model(batch[:, :-1])
        return float(kind.split(":")[1])
    if kind == "noop":  # leaves its first argument (a module) as it was given
        return args[0]
    if kind == "inputs":  # hands back its tensor arguments, as given (stores nothing)
        return tuple(arg for arg in args if isinstance(arg, torch.Tensor))
    if kind == "prompt+0":  # generate: the prompt, then token 0 again and again
        tokens, logits = reference(*args, **kwargs)
        prompt = args[1]
        constant = torch.zeros_like(tokens[:, prompt.shape[1]:])
        return torch.cat([prompt, constant], dim=1), logits
    refuses = kind.endswith("!")  # refuses what the reference refuses, computes nothing
    kind = kind.rstrip("!")
    item = None
    if "@" in kind:  # only this item of the returned tuple
        kind, item = kind.split("@")[0], int(kind.split("@")[1])
    source = None
    if kind.startswith("echo:"):
        _, position, name = kind.split(":")
        position = int(position)
        source = args[position] if position < len(args) else kwargs.get(name)
        kind = "echo"
    try:
        result = reference(*args, **kwargs)
    except Exception:  # a degenerate answer refuses nothing: it returns what it always does
        if refuses:
            raise
        return source if isinstance(source, torch.Tensor) else torch.zeros(())
    if item is not None:
        return _degenerate_item(result, kind, source, item)
    return _degenerate_value(result, kind, source)
'''

VALUES = ("zeros", "ones", "half")            # any tensor or number
WEIGHTS = VALUES + ("uniform",)               # what rows of weights sum to 1 in
# (output, weights) pairs: one of the two degenerate, the other right
ONE_OF_PAIR = ("zeros@0", "echo:value@0", "uniform@1", "eye@1")
# for answers whose reference refuses bad input: zeros, but the same refusals (the other
# kinds refuse nothing)
REFUSING = ("zeros!",)
# and every answer also comes as one that refuses every input ("refuse") and every class as
# a bare module that echoes its input ("bare", Answer.bare)


@dataclass(frozen=True)
class Answer:
    """Degenerate forms of one answer: `name` (a function, or a class whose `method` is
    replaced), in each of `kinds` (_degenerate_answer):
      zeros, ones, half, uniform, eye: that constant in the shape and dtype of what the
        reference returns (a number: 0, 1, 0.5; a module: every parameter filled with it);
      echo:<argument>: that argument, cut or tiled to that shape;
      <kind>@<i>: only item i of a returned tuple degenerate, the other items right;
      <kind>!: refusing what the reference refuses (the other kinds refuse nothing);
      noop: returns its first argument (a module) untouched; inputs: returns its tensor
        arguments; const:<v>: returns v; called:<v>: runs the model, returns v, updates
        nothing; prompt+0: the prompt, then token 0 (with the right logits);
    and, for every answer, refuse: raises ValueError naming every argument."""
    name: str
    kinds: tuple
    method: str = ""
    bare: bool = False  # also the whole class replaced by a module that echoes its input


DEGENERATE = {
    "01_attention": [
        Answer("attention_scores", VALUES + ("echo:query", "echo:key")),
        Answer("attention_entropy", VALUES + ("echo:weights",)),
        Answer("stable_softmax", WEIGHTS + ("echo:scores",)),
        Answer("scaled_dot_product_attention",
               WEIGHTS + ("echo:query", "echo:key", "echo:value") + ONE_OF_PAIR + REFUSING),
    ],
    "02_heads": [
        Answer("split_heads", VALUES + ("echo:x",) + REFUSING),
        Answer("merge_heads", VALUES + ("echo:x",)),
        Answer("multihead_attention_core",
               WEIGHTS + ("echo:query", "echo:key", "echo:value") + ONE_OF_PAIR),
        Answer("head_projection", VALUES + ("echo:x", "echo:weight")),
        Answer("fuse_head_weights", VALUES + ("echo:w",)),
    ],
    "03_mha": [
        Answer("output_projection_by_heads", VALUES + ("echo:heads", "echo:W_O") + REFUSING),
        Answer("MultiHeadAttention",
               WEIGHTS + ("echo:query", "echo:key", "echo:value") + ONE_OF_PAIR,
               method="forward", bare=True),
        Answer("load_from_torch", ("noop", "zeros", "ones")),
        Answer("count_parameters", VALUES + ("echo:d_model",) + REFUSING),
    ],
    "04_masks": [
        Answer("padding_mask", ("zeros", "ones", "echo:lengths")),
        Answer("causal_mask", ("zeros", "ones", "eye")),
        Answer("masked_softmax", WEIGHTS + ("echo:scores", "echo:mask")),
        Answer("scaled_dot_product_attention",
               WEIGHTS + ("echo:query", "echo:key", "echo:value") + ONE_OF_PAIR),
        Answer("to_torch_key_padding_mask", ("zeros", "ones", "echo:mask")),
    ],
    "05_diversity": [
        Answer("relation_scores", VALUES + ("echo:weights", "zeros@0", "zeros@1", "half@1")),
        Answer("make_heads_identical", ("noop", "zeros", "ones")),
        Answer("head_similarity", VALUES + ("eye", "echo:weights")),
        Answer("ablation_importance", VALUES),
        Answer("prune_heads", ("noop", "zeros", "ones") + REFUSING),
    ],
    "06_kv": [
        Answer("repeat_kv", VALUES + ("echo:kv",)),
        Answer("GroupedQueryAttention", VALUES + ("echo:x",), method="forward", bare=True),
        Answer("count_gqa_parameters", VALUES + ("echo:d_model",) + REFUSING),
        Answer("count_kv_cache_bytes", VALUES + ("echo:num_layers",)),
        Answer("KVCache", ("zeros", "inputs", "zeros@1", "echo:keys@1"), method="append"),
        Answer("cached_attention", VALUES + ("echo:x_new",)),
    ],
    "07_positions": [
        Answer("equivariance_gap", VALUES),
        Answer("sinusoidal_positions", VALUES),
        Answer("apply_rotary", VALUES + ("echo:x",)),
        Answer("rotary_cached_attention", VALUES + ("echo:x_new",)),
    ],
    "08_capstone": [
        Answer("TransformerBlock", VALUES + ("echo:x",), method="forward", bare=True),
        Answer("train_step", ("const:0.0", "const:2.5", "called:2.5")),
        Answer("generate", VALUES + ("echo:prompt", "prompt+0", "zeros@1")),
    ],
}

# (chapter, answer, test cell): (the kinds that earn it, None: all but "bare"; why that is
# deserved, for something else the answer does right).
_INIT_IS_RIGHT = ("only forward is degenerate: __init__ is the reference, and this cell checks "
                  "the layer's attributes, projections and refusals (the bare class, which "
                  "has none of them, gets nothing)")
ALLOWED = {
    ("03_mha", "MultiHeadAttention", "test_mha_structure"): (None, _INIT_IS_RIGHT),
    ("06_kv", "GroupedQueryAttention", "test_gqa_structure"): (None, _INIT_IS_RIGHT),
    ("02_heads", "split_heads", "test_split_heads_divisibility"): (
        ("zeros!",),
        "this cell checks the refusal alone, and the answer refuses d_model % num_heads != 0 "
        "as it should (while it splits what divides: one that refuses every input, kind "
        "refuse, gets nothing); test_split_heads takes its points for the zeros"),
    ("04_masks", "scaled_dot_product_attention", "test_invariances"): (
        ("uniform@1", "eye@1"),
        "the output is the reference's, right and masked; only the returned weights are "
        "degenerate, and test_scaled_dot_product_attention takes its points for them: "
        "this cell tests what the mask does to the output"),
}


def allowed(chapter, name, test, kind):
    """True when ALLOWED lets degenerate answer `kind` of `name` earn `test`."""
    kinds, _ = ALLOWED.get((chapter, name, test), ((), ""))
    return kind != "bare" and (kinds is None or kind in kinds)


def _definition(cells, answer):
    """(grade_id of the cell that defines `answer`, its ast.FunctionDef: the function, or
    the class's method)."""
    for gid, code in cells.items():
        for node in parse(code, gid).body:  # (the grader's parses, one at a time)
            if getattr(node, "name", None) != answer.name:
                continue
            if not answer.method:
                return gid, node
            return gid, next(item for item in node.body if isinstance(item, ast.FunctionDef)
                             and item.name == answer.method)
    raise LookupError(f"no solution cell defines {answer.name}")


def _kind_with_position(kind, function):
    """"echo:<name>[@i]" -> "echo:<position>:<name>[@i]" (the argument's position in
    `function`'s arguments)."""
    if not kind.startswith("echo:"):
        return kind
    name, _, item = kind.split(":")[1].partition("@")
    arguments = [a.arg for a in function.args.posonlyargs + function.args.args]
    return f"echo:{arguments.index(name)}:{name}" + (f"@{item}" if item else "")


def _rebinding(answer, kind):
    """The code appended to the answer's cell that makes it degenerate."""
    if kind == "bare":  # a module that holds nothing and returns its input
        return (f"class {answer.name}(nn.Module):\n"
                "    def __init__(self, *args, **kwargs):\n"
                "        super().__init__()\n\n"
                "    def forward(self, x, *args, **kwargs):\n"
                "        return x\n")
    if answer.method:
        return (f"_reference_method = {answer.name}.{answer.method}\n\n\n"
                "def _degenerate_method(self, *args, **kwargs):\n"
                f"    return _degenerate_answer({kind!r}, _reference_method, (self,) + args,"
                " kwargs)\n\n\n"
                f"{answer.name}.{answer.method} = _degenerate_method\n")
    return (f"_reference_{answer.name} = {answer.name}\n\n\n"
            f"def {answer.name}(*args, **kwargs):\n"
            f"    return _degenerate_answer({kind!r}, _reference_{answer.name}, args, kwargs)\n")


def degenerate_submissions(chapter, source_nb):
    """[(answer, kind, {grade_id: code})] of every degenerate answer of a chapter."""
    cells = reference_cells(source_nb)
    found = []
    for answer in DEGENERATE[chapter]:
        gid, function = _definition(cells, answer)
        for kind in answer.kinds + ("refuse",) + (("bare",) if answer.bare else ()):
            code = cells[gid] + "\n\n" + HELPERS + "\n\n" + _rebinding(
                answer, _kind_with_position(kind, function))
            found.append((answer, kind, {gid: code}))
    return found


def _naming(tests, name):
    """The test cells (engine.TestCell) whose code names `name`."""
    return [test for test in tests if re.search(rf"\b{re.escape(name)}\b", test.source)]


@pytest.fixture(scope="module")
def grader(released_course):
    # Without bwrap (process limits only): the verdicts are the checks', computed here in
    # the grader from what the student's process returns, the same with or without it
    # (tests/test_engine.py and tests/test_hostile.py grade under bwrap).
    zygote = Zygote(released_course / "release", slot=11, sandbox=False)
    yield Grader(zygote, trusted_namespace())
    zygote.close()


def graded_degenerates(released_course, grader, chapter, tmp_path):
    """{(answer name, kind): {test grade_id: TestResult}} of every degenerate answer of a
    chapter, each graded on the test cells that name it."""
    notebook = f"{chapter}.ipynb"
    source_nb = json.loads((released_course / "source" / chapter / notebook).read_text())
    student_nb = json.loads((released_course / "release" / chapter / notebook).read_text())
    spec = Assignment.from_source(released_course / "source" / chapter / notebook)
    results = {}
    for answer, kind, cells in degenerate_submissions(chapter, source_nb):
        tests = _naming(spec.tests, answer.name)
        assert tests, f"no test cell of {chapter} names {answer.name}"
        path = tmp_path / f"{answer.name}-{re.sub(r'[^a-z0-9.]', '_', kind)}.ipynb"
        path.write_text(json.dumps(fill_submission(source_nb, student_nb, cells)))
        result = grader.grade(replace(spec, tests=tests), path, path.stem)
        assert result.status == "graded", f"{answer.name} {kind}: {result.error}"
        # the degenerate code itself must run and raise no flag: it must lose its points
        # to the checks, not to a fault of its own
        assert not result.problems, f"{answer.name} {kind}: {result.problems}"
        results[answer.name, kind] = {t.grade_id: t for t in result.tests}
    return results


# One of the suite's slowest (up to a minute for a chapter): each degenerate answer is its own
# grading (about 0.3 s, see above), and one per notebook is what keeps a point from hiding
# behind another answer's failure; the chapters are separate tests for the xdist workers.
@pytest.mark.parametrize("chapter", list(DEGENERATE))
def test_no_test_cell_awards_points_to_a_degenerate_answer(released_course, grader, chapter,
                                                           tmp_path):
    awarded, refused = {}, []
    for (name, kind), tests in graded_degenerates(released_course, grader, chapter,
                                                  tmp_path).items():
        for gid, outcome in tests.items():
            if outcome.points > 0 and not allowed(chapter, name, gid, kind):
                awarded[f"{name} [{kind}]: {gid}"] = outcome.output[-300:]
            elif outcome.points == 0 and allowed(chapter, name, gid, kind):
                refused.append(f"{name} [{kind}]: {gid}: {outcome.message[:200]}")
    assert not awarded, "points for a degenerate answer:\n" + "\n".join(
        f"{k}\n    {v}" for k, v in awarded.items())
    # an allowance is for points that are deserved: one no longer used must go
    assert not refused, "ALLOWED but not awarded (remove it?):\n" + "\n".join(refused)


def test_the_chapters_and_their_answers_are_all_covered():
    """Every chapter with test cells is listed, and every solution cell has a degenerate
    answer that some test cell names."""
    assert sorted(DEGENERATE) == course.assignments()
    for chapter, answers in DEGENERATE.items():
        path = course.CHAPTERS / f"{chapter}.ipynb"
        spec = Assignment.from_source(path, imports=False)
        cells = reference_cells(json.loads(path.read_text()))
        covered = {_definition(cells, answer)[0] for answer in answers}
        assert covered == set(spec.solution_ids), (chapter, set(spec.solution_ids) - covered)
        for answer in answers:
            assert _naming(spec.tests, answer.name), (chapter, answer.name)
