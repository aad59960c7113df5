"""The capstone's reference code: solutions.capstone (the block, the training step,
generation), solutions.capstone_lab (corpus, tokenizer, language model, training loop, the
hooks that bring chapter 5's tools to the model) and the ablation's record
(bench/capstone_ablation.py, chapters/data/capstone_ablation.json)."""
import ast
import copy
import hashlib
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from solutions.capstone import TransformerBlock, generate, train_step
from solutions.capstone_lab import (CORPUS, DEFAULT_TRAIN_STEPS, CharLM,
                                    CharTokenizer, GumbelSampler, attention_maps, evaluate_loss,
                                    gated_heads, random_windows, read_ablation, read_corpus,
                                    split_train_val, swiglu_width, train, train_steps,
                                    unigram_loss)
from solutions.kv import KVCache, count_kv_cache_bytes, repeat_kv
from solutions.rotary import apply_rotary

README = CORPUS.parent / "README.md"
NOTEBOOK = CORPUS.parent.parent / "08_capstone.ipynb"


def tiny_model(dropout=0.0, seed=0, vocab_size=11, context=12, num_kv_heads=2):
    return CharLM(vocab_size, context, 16, 4, 2, TransformerBlock, num_kv_heads=num_kv_heads,
                  dropout=dropout, seed=seed)


def block(dropout=0.0, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    b = TransformerBlock(16, 4, 2, 24, dropout).to(dtype)
    with torch.no_grad():  # non-trivial norm weights and biases
        for p in b.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return b.eval()


def rotary_causal_attention(attn, h):
    """Grouped-query attention of h (B, L, D) with rotary positions 0 .. L - 1 and the causal
    mask, written out with F.scaled_dot_product_attention (an independent path)."""
    B, L, _ = h.shape
    q = attn.q_proj(h).view(B, L, attn.num_heads, -1).transpose(1, 2)
    k = attn.k_proj(h).view(B, L, attn.num_kv_heads, -1).transpose(1, 2)
    v = attn.v_proj(h).view(B, L, attn.num_kv_heads, -1).transpose(1, 2)
    positions = torch.arange(L)
    q, k = apply_rotary(q, positions), apply_rotary(k, positions)
    k, v = repeat_kv(k, attn.num_heads), repeat_kv(v, attn.num_heads)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)         # (B, h, L, hd)
    return attn.out_proj(heads.transpose(1, 2).reshape(B, L, -1))


# ------------------------------------------------------------------ the block
def test_block_is_pre_rmsnorm_rotary_gqa_swiglu():
    b = block()
    assert isinstance(b.norm1, torch.nn.RMSNorm) and b.attn.num_kv_heads == 2
    assert all(p.bias is None for p in (b.gate_proj, b.up_proj, b.down_proj))
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        rms = lambda t, w: w * t / t.pow(2).mean(-1, keepdim=True).add(  # noqa: E731
            torch.finfo(t.dtype).eps).sqrt()
        y = x + rotary_causal_attention(b.attn, rms(x, b.norm1.weight))
        h = rms(y, b.norm2.weight)
        expected = y + b.down_proj(F.silu(b.gate_proj(h)) * b.up_proj(h))
        assert torch.allclose(b(x), expected, atol=1e-12)


def test_block_is_causal():
    b = block()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    changed = x.clone()
    changed[:, 4:] = torch.randn(2, 3, 16, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(b(x)[:, :4], b(changed)[:, :4])
        assert not torch.allclose(b(x)[:, 4:], b(changed)[:, 4:])


def test_block_with_a_cache_equals_the_full_forward():
    b = block()
    x = torch.randn(3, 8, 16, dtype=torch.float64)
    cache = KVCache()
    with torch.no_grad():
        pieces = [b(x[:, :3], cache=cache)] + [b(x[:, t:t + 1], cache=cache) for t in range(3, 8)]
        assert len(cache) == 8 and cache.keys.shape == (3, 2, 8, 4)   # two key/value heads
        assert torch.allclose(torch.cat(pieces, 1), b(x), atol=1e-12)


def test_the_block_rotates_by_position_and_scores_depend_on_offsets_only():
    q = torch.randn(1, 4, 3, 4, dtype=torch.float64)
    k = torch.randn(1, 4, 3, 4, dtype=torch.float64)
    scores = [apply_rotary(q, torch.arange(s, s + 3)) @ apply_rotary(
        k, torch.arange(s, s + 3)).transpose(-2, -1) for s in (0, 5)]
    assert torch.allclose(scores[0], scores[1], atol=1e-12)   # the same offsets, any start
    b = block()
    unrotated = copy.deepcopy(b)
    unrotated.rotary = False                                  # the ablation's learned variant
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(b(x[:, :1]), unrotated(x[:, :1]), atol=1e-12)  # position 0
        assert not torch.allclose(b(x), unrotated(x), atol=1e-6)


def test_block_dropout_acts_only_in_training():
    b = block(dropout=0.3)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(b(x), b(x))
        b.train()
        assert not torch.allclose(b(x), b.eval()(x))


# ------------------------------------------------------------------ the training step
def test_train_step_lowers_the_loss_and_reaches_every_parameter():
    model = tiny_model(dropout=0.1).eval()
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = torch.randint(11, (4, 13), generator=torch.Generator().manual_seed(0))
    losses = [train_step(model, optimizer, batch) for _ in range(30)]
    assert all(isinstance(loss, float) for loss in losses)
    assert model.training                                   # the step switched it on
    assert losses[-1] < 0.5 * losses[0]
    assert abs(losses[0] - math.log(11)) < 0.1              # GPT-2's small initialisation
    for name, value in model.state_dict().items():
        assert not torch.equal(value, before[name]), f"{name} got no update"


def test_train_step_loss_is_next_token_cross_entropy():
    model = tiny_model()
    batch = torch.randint(11, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = F.cross_entropy(model(batch[:, :-1]).reshape(-1, 11), batch[:, 1:].reshape(-1))
    loss = train_step(model, torch.optim.SGD(model.parameters(), lr=0.0), batch)
    assert loss == pytest.approx(expected.item(), rel=1e-6)


def test_train_step_refuses_a_batch_without_targets():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"\(B, L \+ 1\)"):
        train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.zeros(3, 1).long())


# ------------------------------------------------------------------ generation
@pytest.mark.parametrize("prompt_length, num_tokens", [(1, 11), (4, 8), (11, 1)])
def test_generation_with_and_without_the_cache_agree(prompt_length, num_tokens):
    model = tiny_model(seed=3).train()
    prompt = torch.randint(11, (2, prompt_length), generator=torch.Generator().manual_seed(2))
    cached, cached_logits = generate(model, prompt, num_tokens, use_cache=True)
    plain, plain_logits = generate(model, prompt, num_tokens, use_cache=False)
    assert cached.shape == (2, prompt_length + num_tokens)
    assert cached_logits.shape == (2, num_tokens, 11)
    assert torch.equal(cached, plain) and torch.equal(cached[:, :prompt_length], prompt)
    assert torch.allclose(cached_logits, plain_logits, atol=1e-5)
    assert model.training                                   # the mode is given back
    if num_tokens:
        assert torch.equal(cached[:, prompt_length:], plain_logits.argmax(-1))


def test_generation_refuses_positions_beyond_the_context():
    with pytest.raises(ValueError, match="exceed the context"):
        generate(tiny_model(context=6), torch.zeros(1, 4).long(), 4)


def test_the_model_refuses_a_start_that_is_not_the_caches_length():
    model = tiny_model()
    caches = model.new_caches()
    model(torch.zeros(1, 3).long(), caches=caches)
    with pytest.raises(ValueError, match=r"start=4 but the caches hold 3"):
        model(torch.zeros(1, 1).long(), caches=caches, start=4)


def test_gumbel_sampler_samples_reproducibly_from_the_softmax():
    model = tiny_model(seed=4)
    prompt = torch.zeros(1, 1).long()

    def draw(seed):
        sampler = GumbelSampler(model, 0.7, torch.Generator().manual_seed(seed))
        return generate(sampler, prompt, 6)[0]

    assert torch.equal(draw(0), draw(0)) and not torch.equal(draw(0), draw(1))
    # the Gumbel-max trick: argmax(z / T + G) is distributed as softmax(z / T)
    logits = torch.tensor([[[1.0, 0.0, -1.0]]])
    sampler = GumbelSampler(lambda t, caches=None, start=0: logits.expand(20000, 1, 3), 0.5,
                            torch.Generator().manual_seed(0))
    frequencies = torch.bincount(sampler(torch.zeros(20000, 1).long()).argmax(-1).flatten(),
                                 minlength=3) / 20000
    assert torch.allclose(frequencies, torch.softmax(logits[0, 0] / 0.5, -1), atol=0.01)


# ------------------------------------------------------------------ the corpus and the lab
def test_the_corpus_is_the_file_its_readme_describes():
    text = read_corpus()
    readme = README.read_text()
    digest = re.search(r"SHA-256 `([0-9a-f]{64})`", readme).group(1)
    assert hashlib.sha256(CORPUS.read_bytes()).hexdigest() == digest
    verses, characters, distinct = (int(n.replace(",", "")) for n in re.search(
        r"([\d,]+) verses, ([\d,]+) characters, (\d+) distinct", readme).groups())
    assert (text.count("\n"), len(text), len(set(text))) == (verses, characters, distinct)
    assert not re.search(r"\d+:\d+", text)                  # no verse references left


def test_tokenizer_round_trip_and_unknown_characters():
    tokenizer = CharTokenizer("hello world")
    ids = tokenizer.encode("world hello")
    assert tokenizer.decode(ids) == "world hello" and tokenizer.vocab_size == 8
    with pytest.raises(KeyError, match="'z'"):
        tokenizer.encode("zed")


def test_unigram_loss_is_the_cross_entropy_of_the_frequencies():
    train_ids = torch.tensor([0, 0, 0, 1])                  # counts + 1: 4, 2, 1 of 7
    val_ids = torch.tensor([0, 1, 2])
    expected = -(math.log(4 / 7) + math.log(2 / 7) + math.log(1 / 7)) / 3
    assert unigram_loss(train_ids, val_ids, 3) == pytest.approx(expected)


def test_split_and_windows():
    ids = torch.arange(100)
    train_ids, val_ids = split_train_val(ids, 0.1)
    assert torch.equal(torch.cat([train_ids, val_ids]), ids) and len(val_ids) == 10
    windows = random_windows(ids, 5, 7, torch.Generator().manual_seed(0))
    assert windows.shape == (5, 7)
    assert torch.equal(windows[:, 1:] - windows[:, :-1], torch.ones(5, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="shorter than a window"):
        random_windows(ids[:3], 1, 7, torch.Generator())


def test_train_steps_reads_one_environment_variable(monkeypatch):
    monkeypatch.delenv("COURSE_CAPSTONE_STEPS", raising=False)
    assert train_steps() == DEFAULT_TRAIN_STEPS
    monkeypatch.setenv("COURSE_CAPSTONE_STEPS", "20")
    assert train_steps() == 20
    monkeypatch.setenv("COURSE_CAPSTONE_STEPS", "-3")
    with pytest.raises(ValueError, match="COURSE_CAPSTONE_STEPS"):
        train_steps()


def test_train_runs_the_given_step_and_measures_validation():
    ids = torch.randint(11, (500,), generator=torch.Generator().manual_seed(0))
    model = tiny_model()
    run = train(model, train_step, ids[:400], ids[400:], steps=12, batch_size=4, eval_every=5)
    assert len(run.train_loss) == 12
    assert [step for step, _ in run.val_loss] == [0, 5, 10, 12]
    assert run.val_loss[-1][1] == pytest.approx(evaluate_loss(model, ids[400:], 12))


def test_chapter_5_tools_reach_the_model():
    model = tiny_model(seed=5)
    tokens = torch.randint(11, (3, 10), generator=torch.Generator().manual_seed(0))
    maps = attention_maps(model, tokens)
    assert maps.shape == (2, 3, 4, 10, 10)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 4, 10))
    assert torch.equal(maps.triu(1), torch.zeros_like(maps))  # causal
    # layer 0's maps, written out: the rotated queries and keys of norm1(embeddings)
    first = model.blocks[0]
    with torch.no_grad():
        h = first.norm1(model.tok_emb(tokens))
        q = first.attn.q_proj(h).view(3, 10, 4, 4).transpose(1, 2)
        k = first.attn.k_proj(h).view(3, 10, 2, 4).transpose(1, 2)
        q, k = apply_rotary(q, torch.arange(10)), apply_rotary(k, torch.arange(10))
        scores = q @ repeat_kv(k, 4).transpose(-2, -1) / 2.0
        causal = torch.ones(10, 10, dtype=torch.bool).tril()
        expected = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    assert torch.allclose(maps[0], expected, atol=1e-6)
    # a gate of 0 on head 2 of layer 1 is that head's columns of W_O deleted (zeroed)
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with torch.no_grad(), gated_heads(model, gates):
        gated = model(tokens)
    small = copy.deepcopy(model)
    with torch.no_grad():
        small.blocks[1].attn.out_proj.weight[:, 8:12] = 0.0
        assert torch.allclose(small(tokens), gated, atol=1e-6)
        assert not torch.allclose(model(tokens), gated)     # the hooks are gone after


# ------------------------------------------------------------------ the ablation's record
def _ablation_script():
    spec = importlib.util.spec_from_file_location(
        "capstone_ablation", CORPUS.parent.parent.parent / "bench" / "capstone_ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ablation_record_has_every_variant_and_the_exact_cache_bytes():
    record = read_ablation()
    provenance, config = record["provenance"], record["config"]
    assert set(provenance) >= {"date", "torch", "machine", "steps", "script"}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", provenance["date"])
    assert provenance["steps"] == DEFAULT_TRAIN_STEPS and provenance["script"] == \
        "bench/capstone_ablation.py"
    variants = {(row["num_kv_heads"], row["positions"]): row for row in record["variants"]}
    assert set(variants) == {(g, p) for g in (4, 2, 1) for p in ("rotary", "learned")}
    head_dim = config["d_model"] // config["num_heads"]
    for (g, positions), row in variants.items():
        assert row["attention"] == {4: "MHA", 2: "GQA", 1: "MQA"}[g]
        # the exact formula: a key and a value of head_dim float32 numbers per key/value
        # head, per layer, per position of the context
        assert row["cache_bytes"] == 2 * config["num_layers"] * g * head_dim * 4 * \
            config["context"] == count_kv_cache_bytes(config["num_layers"], g, head_dim, 4) * \
            config["context"]
        assert 0.5 < row["val_loss"] < math.log(60) and len(row["first_losses"]) == 5
        model = _ablation_script().build(g, positions, config, vocab_size=60)
        assert row["parameters"] == sum(p.numel() for p in model.parameters())


def test_the_chapter_trains_the_model_the_ablation_recorded():
    """The chapter's sizes are the ablation's, so its GQA rotary row is the chapter's model."""
    cells = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]]
    (line,) = [line for cell in cells for line in cell.splitlines()
               if line.startswith("CONTEXT, D_MODEL, NUM_HEADS, NUM_KV_HEADS")]
    context, d_model, num_heads, num_kv_heads, num_layers, dropout = ast.literal_eval(
        line.split(" = ")[1])
    config = read_ablation()["config"]
    assert (context, d_model, num_heads, num_layers, dropout) == tuple(
        config[k] for k in ("context", "d_model", "num_heads", "num_layers", "dropout"))
    assert num_kv_heads == 2


def test_one_variant_retrained_reproduces_the_recorded_first_losses():
    """Cheap: the MQA rotary variant's first two steps, with the script's own code (the
    first two losses do not depend on the run's length; the third follows a learning rate
    that the cosine schedule over all the steps set)."""
    script = _ablation_script()
    (row,) = [r for r in read_ablation()["variants"]
              if r["num_kv_heads"] == 1 and r["positions"] == "rotary"]
    run, _ = script.run_variant(1, "rotary", 2, script.corpus())
    assert run.train_loss == pytest.approx(row["first_losses"][:2], rel=1e-5)


def test_swiglu_width_keeps_the_parameters_of_a_4d_gelu_network():
    for d_model in (16, 64, 96):
        width = swiglu_width(d_model)
        assert width % 8 == 0 and 0 <= width - 8 * d_model / 3 < 8
        assert abs(3 * d_model * width - 2 * d_model * 4 * d_model) <= 24 * d_model


def test_the_release_ships_the_lab_the_corpus_and_no_answer():
    from autograde import course

    shipped = {name for _, name in course.shipped_files("08_capstone")}
    assert {"solutions/capstone_lab.py", "solutions/kv.py", "solutions/rotary.py",
            "solutions/diversity.py", "data/genesis_kjv.txt", "data/README.md",
            "data/capstone_ablation.json", "checks/capstone.py"} <= shipped
    assert "solutions/capstone.py" not in shipped
    assert course.answers_shipped("08_capstone") == [
        "01_attention", "02_heads", "03_mha", "04_masks", "05_diversity", "06_kv"]


def test_the_ablation_text_claims_hold_in_the_record():
    """The sentences after the chapter's ablation table, against the record and chapter 6's
    formula."""
    rows = {(r["num_kv_heads"], r["positions"]): r for r in read_ablation()["variants"]}
    for g in (4, 2, 1):
        gap = rows[g, "learned"]["val_loss"] - rows[g, "rotary"]["val_loss"]
        assert 0.045 <= gap < 0.075                                  # "by 0.05 to 0.07 nats"
        assert rows[g, "learned"]["parameters"] - rows[g, "rotary"]["parameters"] == 64 * 64
    for positions, most in (("rotary", 0.015), ("learned", 0.025)):  # "about 0.01 (0.02)"
        for many, few in ((4, 2), (2, 1)):
            rise = rows[few, positions]["val_loss"] - rows[many, positions]["val_loss"]
            assert 0 < rise < most
    assert rows[4, "rotary"]["cache_bytes"] - rows[1, "rotary"]["cache_bytes"] == 48 * 1024
    gqa, mha = (count_kv_cache_bytes(80, g, 128, 2) * 4096 for g in (8, 64))   # Llama 2 70B
    assert (gqa, mha) == (1.25 * 2**30, 10 * 2**30)
