"""Chapter 7 says the reader's own chapter 3 module can replace the course's
MultiHeadAttention, with two additions it lists (chapter 4's masks; a `dropout` argument
applied to the weights), and names where it then works: the three exercises, the training,
the generation and the attention maps; the head gates and the pruning need chapter 5's module.
These tests do what the text says: chapter 3's reference module, pasted into chapter 7 with
exactly the additions the text words, runs there, and only there."""
import json

import pytest
import torch

from autograde import course, kit
from solutions.capstone_lab import CharLM, attention_maps, gated_heads
from solutions.diversity import prune_heads
from solutions.mha import MultiHeadAttention as CourseAttention
from tests.chapter import checks_module
from tests.submissions import reference_cells

check = checks_module("capstone")

CHAPTER_7 = course.CHAPTERS / "08_capstone.ipynb"
# the two additions, in the words of chapter 7's section "The Transformer block"
SIGNATURE = "dropout=0.0"
DROP_LAYER = "self.attn_drop = nn.Dropout(dropout)"
WEIGHTS = "_, weights = scaled_dot_product_attention(q, k, v, mask)"
HEADS = "heads = self.attn_drop(weights) @ v"


def notebook(assignment):
    return json.loads((course.CHAPTERS / f"{assignment}.ipynb").read_text())


def given_cell(nb, needle):
    (source,) = ["".join(c["source"]) for c in nb["cells"]
                 if c["cell_type"] == "code" and needle in "".join(c["source"])]
    return source


def pasted_chapter_3_module():
    """The code a reader pastes into chapter 7: `import math`, chapter 2's split_heads and
    merge_heads (as chapter 3 gives them), chapter 4's masked_softmax and
    scaled_dot_product_attention, and chapter 3's MultiHeadAttention with the two additions
    chapter 7 lists."""
    chapter_3, chapter_4 = notebook("03_mha"), notebook("04_masks")
    helpers = given_cell(chapter_3, "def split_heads(x, num_heads):")
    masks = reference_cells(chapter_4)
    layer = reference_cells(chapter_3)["MultiHeadAttention"]
    for old, new in [("value_size=None, bias=True):", f"value_size=None, bias=True, {SIGNATURE}):"),
                     ("        super().__init__()\n",
                      f"        super().__init__()\n        {DROP_LAYER}\n"),
                     ("heads, weights = scaled_dot_product_attention(q, k, v, mask)",
                      f"{WEIGHTS}\n        {HEADS}")]:
        assert layer.count(old) == 1, old
        layer = layer.replace(old, new)
    return "\n\n".join(["import math", helpers, masks["masked_softmax"],
                        masks["scaled_dot_product_attention"], layer])


def chapter_7_with_pasted_module():
    reference = reference_cells(notebook("08_capstone"))
    pasted = pasted_chapter_3_module() + "\n\n" + reference["transformer_block"]
    return kit.chapter_namespace(CHAPTER_7, {"transformer_block": pasted},
                                 checks={"check": check})


def test_chapter_7_words_the_additions_the_test_makes():
    text = " ".join(" ".join("".join(c["source"]) for c in notebook("08_capstone")["cells"]
                             if c["cell_type"] == "markdown").split())
    for words in (f"`{SIGNATURE}`", f"`{DROP_LAYER}`", f"`{WEIGHTS}`", f"`{HEADS}`",
                  "`masked_softmax` and `scaled_dot_product_attention`",
                  "`split_heads` and `merge_heads`", "`import math`",
                  "`gated_heads` passes its `head_mask`",
                  "`prune_heads` accepts only that class"):
        assert words in text, words


def test_the_pasted_module_passes_every_check_of_chapter_7():
    namespace = chapter_7_with_pasted_module()
    block = namespace["TransformerBlock"](8, 2, 16, 0.1)
    assert type(block.attn) is namespace["MultiHeadAttention"]
    assert type(block.attn) is not CourseAttention                  # the pasted one runs
    results = kit.run_visible_tests(CHAPTER_7, namespace, hidden=True)
    assert results and all(message is None for message in results.values()), results


def test_the_pasted_module_trains_generates_and_shows_its_maps():
    namespace = chapter_7_with_pasted_module()
    model = CharLM(11, 12, 16, 4, 2, namespace["TransformerBlock"], dropout=0.1, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = torch.randint(11, (4, 13), generator=torch.Generator().manual_seed(0))
    losses = [namespace["train_step"](model, optimizer, batch) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]
    model.train()                                  # attention dropout acts in training only
    tokens = batch[:2, :10]
    with torch.no_grad():
        assert not torch.equal(model(tokens), model(tokens))
    prompt = batch[:2, :3]
    cached, cached_logits = namespace["generate"](model, prompt, 8, use_cache=True)
    plain, plain_logits = namespace["generate"](model, prompt, 8, use_cache=False)
    assert torch.equal(cached, plain) and torch.allclose(cached_logits, plain_logits, atol=1e-5)
    maps = attention_maps(model, tokens)
    assert maps.shape == (2, 2, 4, 10, 10)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 2, 4, 10))


def test_the_gates_and_the_pruning_need_chapter_5s_module_as_the_text_says():
    namespace = chapter_7_with_pasted_module()
    model = CharLM(11, 12, 16, 4, 2, namespace["TransformerBlock"], seed=0).eval()
    tokens = torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(1))
    with pytest.raises(TypeError, match="head_mask"), gated_heads(model, torch.ones(2, 4)):
        model(tokens)
    with pytest.raises(TypeError, match="expected a solutions.MultiHeadAttention"):
        prune_heads(model.blocks[0].attn, [0])
