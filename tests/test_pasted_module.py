"""The capstone says which of the reader's own modules can replace the course's imports, and
where they then work (its section "Your own modules here"):

- the chapter 6 code (repeat_kv, project_heads, attend_heads, GroupedQueryAttention, KVCache,
  decoding_causal_mask, cached_attention, apply_rotary, rotary_cached_attention), pasted
  with the helpers chapter 6 gave it, runs everything: the checks, the training, the
  generation, the maps and the gates;
- chapter 3's MultiHeadAttention, pasted as chapter 3's exercise left it, stands in for
  GroupedQueryAttention where num_kv_heads == num_heads: it passes the check's calls with
  equal head counts, is refused by the others with a message about the key projection's
  shape, and trains, generates, and shows its maps and gates.
These tests do exactly that, with the reference answers of chapters 3 and 6 as the reader's
code (found by the names their solution cells define, in whichever chapter holds them)."""
import json

import pytest
import torch

from autograde import course, kit
from solutions.capstone_lab import CharLM, attention_maps, gated_heads
from solutions.kv import GroupedQueryAttention as CourseGQA
from solutions.mha import MultiHeadAttention as CourseAttention
from tests.chapter import CheckFailure, checks_module
from tests.submissions import reference_cells

check = checks_module("capstone")

CAPSTONE = course.CHAPTERS / "08_capstone.ipynb"
# the line the text tells a reader to change, and what it becomes
GQA_LINE = "self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads)"
MHA_LINE = "self.attn = MultiHeadAttention(d_model, num_heads)"
# the chapter 6 code the text lists, and the helpers it names
CHAPTER_6_NAMES = ("repeat_kv", "project_heads", "attend_heads", "GroupedQueryAttention",
                   "KVCache", "decoding_causal_mask", "cached_attention", "apply_rotary",
                   "rotary_cached_attention")
HELPERS_IMPORT = "from solutions import merge_heads, scaled_dot_product_attention"


def notebook(path):
    return json.loads(path.read_text())


def capstone_text():
    return " ".join(" ".join("".join(c["source"]) for c in notebook(CAPSTONE)["cells"]
                             if c["cell_type"] == "markdown").split())


def defining_cells(names):
    """The reference code of the chapters' solution cells that define `names` (each once),
    and the given cell defining rotary_angles, in course order."""
    found, pieces = set(), []
    for path in sorted(course.CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
        nb = notebook(path)
        for cell in nb["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "def rotary_angles(" in source and \
                    not cell.get("metadata", {}).get("nbgrader"):
                pieces.append(source)
        for code in reference_cells(nb).values():
            defined = {n for n in names if f"def {n}(" in code or f"class {n}" in code}
            if defined and not defined & found:
                found |= defined
                pieces.append(code)
    assert found == set(names), set(names) - found
    return pieces


def capstone_block():
    return reference_cells(notebook(CAPSTONE))["transformer_block"]


def with_chapter_6_code():
    pasted = "\n\n".join([HELPERS_IMPORT, *defining_cells(CHAPTER_6_NAMES), capstone_block()])
    return kit.chapter_namespace(CAPSTONE, {"transformer_block": pasted},
                                 checks={"check": check})


def with_chapter_3_module():
    (layer,) = [code for code in reference_cells(notebook(course.CHAPTERS / "03_mha.ipynb"))
                .values() if "class MultiHeadAttention" in code]
    block = capstone_block()
    assert block.count(GQA_LINE) == 1
    pasted = layer + "\n\n" + block.replace(GQA_LINE, MHA_LINE)
    return kit.chapter_namespace(CAPSTONE, {"transformer_block": pasted},
                                 checks={"check": check})


def test_the_text_words_what_the_tests_paste():
    text = capstone_text()
    for words in [f"`{name}`" for name in CHAPTER_6_NAMES] + [
            "`rotary_angles`", f"`{HELPERS_IMPORT}`", f"`{MHA_LINE}`",
            "where `num_kv_heads == num_heads`", "Its `forward` is never called"]:
        assert words in text, words


def trains_generates_and_shows_maps_and_gates(block, num_kv_heads):
    model = CharLM(11, 12, 16, 4, 2, block, num_kv_heads=num_kv_heads, dropout=0.1, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.randint(11, (4, 13), generator=torch.Generator().manual_seed(0))
    reference = reference_cells(notebook(CAPSTONE))
    namespace = {}
    exec(reference["train_step"] + "\n" + reference["generate"],
         kit.chapter_namespace(CAPSTONE), namespace)
    losses = [namespace["train_step"](model, optimizer, batch) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
    prompt = batch[:2, :3]
    cached, cached_logits = namespace["generate"](model, prompt, 8, use_cache=True)
    plain, plain_logits = namespace["generate"](model, prompt, 8, use_cache=False)
    assert torch.equal(cached, plain) and torch.allclose(cached_logits, plain_logits, atol=1e-5)
    tokens = batch[:2, :10]
    maps = attention_maps(model, tokens)
    assert maps.shape == (2, 2, 4, 10, 10)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 4, 10))
    gates = torch.ones(2, 4)
    gates[0, 1] = 0.0
    with torch.no_grad(), gated_heads(model.eval(), gates):
        gated = model(tokens)
    with torch.no_grad():
        assert not torch.allclose(gated, model(tokens))


def test_the_pasted_chapter_6_code_passes_every_check_and_runs_the_chapter():
    namespace = with_chapter_6_code()
    block = namespace["TransformerBlock"](8, 2, 1, 16, 0.1)
    assert type(block.attn) is namespace["GroupedQueryAttention"]
    assert type(block.attn) is not CourseGQA                       # the pasted one runs
    assert namespace["KVCache"].__module__ == "__main__"
    results = kit.run_visible_tests(CAPSTONE, namespace, hidden=True)
    assert results and all(message is None for message in results.values()), results
    trains_generates_and_shows_maps_and_gates(namespace["TransformerBlock"], 2)


def test_chapter_3s_module_is_the_block_with_as_many_key_value_heads_as_query_heads():
    namespace = with_chapter_3_module()
    block = namespace["TransformerBlock"](8, 2, 2, 16, 0.1)
    assert type(block.attn) is namespace["MultiHeadAttention"]
    assert type(block.attn) is not CourseAttention
    for sizes in (dict(num_heads=2, num_kv_heads=2),
                  dict(seed=1234, B=3, L=7, d_model=12, num_heads=3, num_kv_heads=3, d_ff=20,
                       dtype=torch.float64)):
        check.transformer_block(namespace["TransformerBlock"], namespace["KVCache"], **sizes)
    with pytest.raises(CheckFailure, match=r"attn\.k_proj\.weight has shape \(8, 8\), "
                                           r"expected \(4, 8\)"):
        check.transformer_block(namespace["TransformerBlock"], namespace["KVCache"])
    trains_generates_and_shows_maps_and_gates(namespace["TransformerBlock"], 4)
