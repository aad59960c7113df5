"""Chapter 7's reference code: solutions.capstone (the block, the training step, generation)
and solutions.capstone_lab (corpus, tokenizer, language model, training loop, the hooks that
bring chapter 5's tools to the model)."""
import copy
import hashlib
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from solutions.capstone import TransformerBlock, generate, train_step
from solutions.capstone_lab import (CORPUS, DEFAULT_TRAIN_STEPS, CharLM, CharTokenizer,
                                    GumbelSampler, attention_maps, evaluate_loss, gated_heads,
                                    random_windows, read_corpus, split_train_val, train,
                                    train_steps, unigram_loss)
from solutions.diversity import prune_heads
from solutions.kv import KVCache

README = CORPUS.parent / "README.md"


def tiny_model(dropout=0.0, seed=0, vocab_size=11, context=12):
    return CharLM(vocab_size, context, 16, 4, 2, TransformerBlock, dropout=dropout, seed=seed)


def block(dropout=0.0, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    b = TransformerBlock(16, 4, 32, dropout).to(dtype)
    with torch.no_grad():  # non-trivial LayerNorm parameters and biases
        for p in b.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return b.eval()


# ------------------------------------------------------------------ the block
def test_block_is_pre_layernorm():
    b = block()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        h = b.ln1(x)
        allowed = torch.ones(5, 5, dtype=torch.bool).tril()
        y = x + b.attn(h, h, h, mask=allowed)[0]
        expected = y + b.ff(b.ln2(y))
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
        assert len(cache) == 8
        assert torch.allclose(torch.cat(pieces, 1), b(x), atol=1e-12)


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
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with torch.no_grad(), gated_heads(model, gates):
        gated = model(tokens)
    small = copy.deepcopy(model)
    small.blocks[1].attn = prune_heads(model.blocks[1].attn, [2])
    with torch.no_grad():
        assert torch.allclose(small(tokens), gated, atol=1e-6)
        assert not torch.allclose(model(tokens), gated)     # the hooks are gone after


def test_the_release_ships_the_lab_the_corpus_and_no_answer():
    from autograde import course

    shipped = {name for _, name in course.shipped_files("08_capstone")}
    assert {"solutions/capstone_lab.py", "solutions/kv.py", "solutions/diversity.py",
            "data/genesis_kjv.txt", "data/README.md", "checks/capstone.py"} <= shipped
    assert "solutions/capstone.py" not in shipped
    assert course.answers_shipped("08_capstone") == [
        "01_attention", "02_heads", "03_mha", "04_masks", "05_diversity", "06_kv"]
