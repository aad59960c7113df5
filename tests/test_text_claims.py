"""The numbers chapters 6 and 7 state, computed again: the rotary bases of the models in
chapter 6's table, as chapter 7's rotary section states them, the KV cache of the published
configurations, and the cache against the weights that one decoding step of Llama 2 7B reads.
Each test reads the chapters' own table (MODELS) and prose, so that a number changed in one
place and not the other fails here."""
import ast
import json
import math
from pathlib import Path

import pytest

from solutions.kv import count_gqa_parameters, count_kv_cache_bytes
from solutions.rotary import apply_rotary, rotary_angles

REPO = Path(__file__).resolve().parent.parent
CHAPTER_6 = json.loads((REPO / "chapters" / "06_kv.ipynb").read_text())
CHAPTER_7 = json.loads((REPO / "chapters" / "07_positions.ipynb").read_text())
# the published config.json of each model (Falcon 7B's names no rope_theta: its code's 10000)
ROPE_THETA = {"Llama 2 7B": 10000.0, "Llama 2 70B": 10000.0, "Llama 3 8B": 500000.0,
              "Mistral 7B": 10000.0, "Falcon 7B": 10000.0}


def sources(kind, chapter=CHAPTER_6):
    return ["".join(c["source"]) for c in chapter["cells"] if c["cell_type"] == kind]


def prose(chapter=CHAPTER_6):
    """A chapter's markdown, with every run of white space (line breaks too) one space."""
    return " ".join(" ".join(sources("markdown", chapter)).split())


def models():
    """The chapter's MODELS table: {name: (layers, heads, kv_heads, d_model, rope_theta)}."""
    for code in sources("code"):
        if "MODELS = [" not in code:
            continue
        for node in ast.parse(code).body:
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["MODELS"]:
                return {row[0]: tuple(row[1:6]) for row in ast.literal_eval(node.value)}
    raise AssertionError("chapter 6 has no MODELS table")


def test_the_table_holds_each_models_published_rope_theta():
    table = models()
    assert {name: row[4] for name, row in table.items()} == ROPE_THETA


def test_the_rotary_section_states_the_bases_of_the_table():
    by_base = {}
    for name, row in models().items():
        by_base.setdefault(row[4], []).append(name)
    phrases = [f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
               for names in by_base.values()]
    stated = (f"`rope_theta` = {10000:.0f} for {phrases[0]}, and {500000:.0f} for {phrases[1]}")
    assert list(by_base) == [10000.0, 500000.0]
    assert stated in prose(CHAPTER_7)
    assert "chapter 6's table of real models" in prose(CHAPTER_7)
    # and the chapter's functions default to RoFormer's 10000
    assert rotary_angles.__defaults__ == (10000.0,)
    assert apply_rotary.__defaults__ == (10000.0,)
    assert "base=10000.0" in " ".join(sources("code", CHAPTER_7))


def test_a_larger_base_turns_the_slowest_pair_slower():
    positions = __import__("torch").arange(2)
    slow_10k = rotary_angles(positions, 128, 10000.0)[1][1, -1].item()     # sin at p = 1
    slow_500k = rotary_angles(positions, 128, 500000.0)[1][1, -1].item()
    assert 0 < slow_500k < slow_10k


def test_the_kv_cache_answer_of_the_real_models():
    table = models()
    layers, heads, kv_heads, d_model, _ = table["Llama 2 7B"]
    per_token = count_kv_cache_bytes(layers, kv_heads, d_model // heads)
    assert (per_token / 2**10, 4096 * per_token / 2**30) == (512, 2.0)
    layers, heads, kv_heads, d_model, _ = table["Llama 2 70B"]
    per_token = count_kv_cache_bytes(layers, kv_heads, d_model // heads)
    assert (per_token / 2**10, 4096 * per_token / 2**30) == (320, 1.25)
    assert count_kv_cache_bytes(layers, heads, d_model // heads) / 2**10 == 2560
    text = prose()
    assert "`512` KiB a token, `2.00` GiB for 4096 tokens" in text
    assert "`320` KiB a token, `1.25` GiB" in text and "`2,560` KiB a token" in text


def test_one_step_of_llama_2_7b_reads_more_weights_than_cache_at_batch_1():
    layers, heads, kv_heads, d_model, _ = models()["Llama 2 7B"]
    d_ff, vocab, context = 11008, 32000, 4096          # Llama-2-7b-hf's config.json
    assert "d_ff, vocab = 11008, 32000" in " ".join(sources("code"))
    per_layer = (count_gqa_parameters(d_model, heads, kv_heads, bias=False)
                 + 3 * d_model * d_ff + 2 * d_model)
    parameters = layers * per_layer + d_model + 2 * vocab * d_model
    assert parameters == 6_738_415_616                 # Llama 2 7B's published count
    weights_read = 2 * (parameters - vocab * d_model)  # the input embedding: one row a token
    cache = context * count_kv_cache_bytes(layers, kv_heads, d_model // heads)
    crossover = weights_read / count_kv_cache_bytes(layers, kv_heads, d_model // heads)
    text = prose()
    assert (f"At batch 1 a step of Llama 2 7B reads {weights_read / 1e9:.2f} GB of weights and "
            f"{cache / 2**30:.2f} GiB ({cache / 1e9:.2f} GB) of cache: the weights are "
            f"{['', 'one', 'two', 'three', 'four', 'five', 'six'][int(weights_read / cache)]} "
            f"times more bytes") in text
    assert (f"passes {crossover:,.0f} tokens ({math.ceil(crossover / context)} sequences of "
            f"{context:,} tokens)") in text
    assert weights_read > cache and 8 * cache > weights_read


@pytest.mark.parametrize("symbol", [r"b^{-2i/d}", "$i + d/2$", "$(i, i + d/2)$"])
def test_head_dim_is_d_k_in_the_maths(symbol):
    assert symbol not in prose(CHAPTER_6) and symbol not in prose(CHAPTER_7)
