"""The capstone's lab: the corpus, a character tokenizer, the language model around the
student's TransformerBlock, the training loop and the hooks that bring chapter 5's tools to
the model. No answer to the capstone's exercises lives here (they are in
solutions.capstone): the release of the capstone ships this module.

Shape letters: B batch, L sequence length (<= context), D d_model, V vocab_size,
N number of layers.
"""
import contextlib
import json
import math
import time
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import environment_count


# The corpus shipped beside the chapter (chapters/data/README.md: source and licence).
CORPUS = Path(__file__).resolve().parent.parent / "chapters" / "data" / "genesis_kjv.txt"
# The training run's length: one place, so that the grader and the tests can shrink it
# (COURSE_CAPSTONE_STEPS=20) while the book trains for real.
DEFAULT_TRAIN_STEPS = 800


def train_steps():
    """The number of training steps of the chapter's long run: $COURSE_CAPSTONE_STEPS, or
    DEFAULT_TRAIN_STEPS when it is unset."""
    return environment_count("COURSE_CAPSTONE_STEPS") or DEFAULT_TRAIN_STEPS


def read_corpus(path=None):
    """The corpus text: `path`, or data/genesis_kjv.txt beside the notebook (the unzipped
    chapter, the book) or in the repository."""
    candidates = [Path(path)] if path else [Path("data") / CORPUS.name, CORPUS]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise FileNotFoundError(f"the corpus is missing: looked for {', '.join(map(str, candidates))}")


# The ablation's record (bench/capstone_ablation.py writes it), shipped beside the chapter.
ABLATION = CORPUS.parent / "capstone_ablation.json"


def read_ablation(path=None):
    """The ablation's record, a dict: "provenance", "config" and "variants" (one dict per
    variant: attention, num_kv_heads, positions, parameters, val_loss, first_losses,
    cache_bytes, cpu_seconds, greedy). Read from `path`, or data/capstone_ablation.json
    beside the notebook or in the repository."""
    candidates = [Path(path)] if path else [Path("data") / ABLATION.name, ABLATION]
    for candidate in candidates:
        if candidate.is_file():
            return json.loads(candidate.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"the ablation's record is missing: looked for "
                            f"{', '.join(map(str, candidates))}")


class CharTokenizer:
    """Characters <-> integers: the sorted distinct characters of `text` are the vocabulary."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        """str -> (len(text),) long tensor; raises KeyError naming an unknown character."""
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise KeyError(f"characters not in the vocabulary: {unknown}")
        return torch.tensor([self.index[c] for c in text], dtype=torch.long)

    def decode(self, ids):
        """A sequence of ids (tensor or list) -> str."""
        return "".join(self.chars[int(i)] for i in ids)


def split_train_val(ids, val_fraction=0.1):
    """(train ids, validation ids): the last `val_fraction` of the text is held out, so no
    validation character was seen in training."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(ids) * (1.0 - val_fraction))
    return ids[:cut], ids[cut:]


def unigram_loss(train_ids, val_ids, vocab_size):
    """The cross-entropy (nats per character) of the validation text under the character
    frequencies of the training text: the loss of a model that ignores the context.
    Add-one smoothing keeps a character absent from training finite."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0     # (V,)
    log_p = (counts / counts.sum()).log()                                      # (V,)
    return -log_p[val_ids].mean().item()


def random_windows(ids, batch_size, length, generator):
    """(batch_size, length) long: windows of `ids` at random offsets drawn from `generator`."""
    if len(ids) < length:
        raise ValueError(f"the text ({len(ids)} ids) is shorter than a window ({length})")
    starts = torch.randint(len(ids) - length + 1, (batch_size,), generator=generator)
    return torch.stack([ids[s:s + length] for s in starts.tolist()])           # (B, length)


def swiglu_width(d_model):
    """d_ff of a SwiGLU feed-forward with about the parameters of a GELU one of width
    4 * d_model: three matrices of d_ff instead of two of 4 * d_model give d_ff = 8/3 *
    d_model (Shazeer 2020; Llama), here rounded up to a multiple of 8."""
    return 8 * math.ceil(8 * d_model / 3 / 8)


class CharLM(nn.Module):
    """A causal language model: a token embedding, `num_layers` blocks of `block` (the
    chapter's TransformerBlock(d_model, num_heads, num_kv_heads, d_ff, dropout)), a final
    RMSNorm and a linear head to the vocabulary. Positions: "rotary" (the blocks rotate
    queries and keys; the model adds nothing) or "learned" (GPT-2's position embeddings,
    added to the token embeddings; then the blocks must not rotate).

    forward(tokens (B, L) long, caches=None, start=0) -> logits (B, L, V).
    start: the position of tokens[:, 0] in the sequence (with a cache, the number of
    positions already cached: len(caches[0])). caches: None, or one KV cache per block
    (new_caches()).
    """

    def __init__(self, vocab_size, context, d_model, num_heads, num_layers, block, *,
                 num_kv_heads=None, d_ff=None, dropout=0.0, positions="rotary", seed=None):
        super().__init__()
        if positions not in ("rotary", "learned"):
            raise ValueError(f'positions must be "rotary" or "learned", got {positions!r}')
        if seed is not None:
            torch.manual_seed(seed)
        self.vocab_size, self.context, self.positions = vocab_size, context, positions
        self.num_layers, self.num_heads = num_layers, num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(context, d_model) if positions == "learned" else None
        self.blocks = nn.ModuleList(
            block(d_model, num_heads, self.num_kv_heads, d_ff or swiglu_width(d_model), dropout)
            for _ in range(num_layers))
        self.norm_f = nn.RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        # GPT-2's standard deviation 0.02 (not its 1/sqrt(N) scaling of the layers that write
        # into the residual stream): small normal weights keep the first losses near log(V)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_caches(self):
        """One empty KV cache per block (chapter 6's KVCache)."""
        from .kv import KVCache
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens, caches=None, start=0):
        B, L = tokens.shape
        if start + L > self.context:
            raise ValueError(f"positions {start}..{start + L - 1} exceed the context "
                             f"({self.context})")
        if caches is not None and start != len(caches[0]):
            raise ValueError(f"start={start} but the caches hold {len(caches[0])} positions: "
                             "the new tokens sit at start = len(cache)")
        x = self.tok_emb(tokens)                                               # (B, L, D)
        if self.pos_emb is not None:
            positions = torch.arange(start, start + L, device=tokens.device)   # (L,)
            x = x + self.pos_emb(positions)                                    # (B, L, D)
        for n, block in enumerate(self.blocks):
            x = block(x) if caches is None else block(x, cache=caches[n])      # (B, L, D)
        return self.head(self.norm_f(x))                                       # (B, L, V)


# ------------------------------------------------------------ chapter 5's tools, on the LM
@contextlib.contextmanager
def gated_heads(model, gates):
    """Inside: every block's attention multiplies query head i of layer n by gates[n, i]
    (chapter 5's head_mask), through a hook on the input of its output projection (the
    merged heads, (B, L, num_heads * head_dim)), so the student's block needs no head_mask
    argument. gates: (num_layers, num_heads)."""
    def gate(g):
        def hook(module, args):
            merged = args[0]                                                   # (B, L, h*hd)
            heads = merged.unflatten(-1, (len(g), -1))                         # (B, L, h, hd)
            return (heads * g.to(merged)[:, None]).flatten(-2),                # (B, L, h*hd)
        return hook

    hooks = [block.attn.out_proj.register_forward_pre_hook(gate(g))
             for block, g in zip(model.blocks, gates)]
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def attention_maps(model, tokens):
    """(num_layers, B, num_heads, L, L): each block's attention weights on `tokens` (B, L),
    in eval mode, recomputed from the queries and keys its attention projected (caught by
    hooks on q_proj and k_proj), rotated when model.positions is "rotary", each key/value
    head repeated for its group of query heads, under the causal mask."""
    from .attention import scaled_dot_product_attention
    from .kv import repeat_kv
    from .masks import causal_mask
    from .rotary import apply_rotary

    projected = []
    hooks = [proj.register_forward_hook(lambda m, args, out: projected.append(out))
             for block in model.blocks for proj in (block.attn.q_proj, block.attn.k_proj)]
    was_training = model.training
    try:
        model.eval()(tokens)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    B, L = tokens.shape
    positions = torch.arange(L, device=tokens.device)                          # (L,)
    maps = []
    for block, q, k in zip(model.blocks, projected[0::2], projected[1::2]):
        h, hd = block.attn.num_heads, block.attn.head_dim
        q = q.view(B, L, h, hd).transpose(1, 2)                                # (B, h, L, hd)
        k = k.view(B, L, -1, hd).transpose(1, 2)                               # (B, g, L, hd)
        if model.positions == "rotary":
            q, k = apply_rotary(q, positions), apply_rotary(k, positions)
        k = repeat_kv(k, h)                                                    # (B, h, L, hd)
        _, weights = scaled_dot_product_attention(q, k, k, causal_mask(L, device=q.device))
        maps.append(weights)                                                   # (B, h, L, L)
    return torch.stack(maps)


class TrainingRun(NamedTuple):
    """What train() measured: the training loss of every step, (step, validation loss)
    pairs, the wall-clock seconds and the CPU seconds of this process (which other jobs on
    the machine do not inflate)."""

    train_loss: list
    val_loss: list
    seconds: float
    cpu_seconds: float


@torch.no_grad()
def evaluate_loss(model, ids, length, batch_size=64, batches=8, seed=0):
    """The mean next-character cross-entropy (nats) of `model` on `batches` fixed random
    windows of `ids` (the same windows for the same seed), in eval mode."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(batches):
        window = random_windows(ids, batch_size, length + 1, generator)        # (B, L+1)
        logits = model(window[:, :-1])                                         # (B, L, V)
        total += F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten()).item()
    model.train(was_training)
    return total / batches


def train(model, train_step, train_ids, val_ids, *, steps, batch_size=32, lr=3e-3,
          seed=0, eval_every=250, cpu_threads=None):
    """Train `model` with AdamW and `train_step(model, optimizer, batch)` (the chapter's
    exercise: one optimisation step on batch (B, context + 1), returning the loss) on
    random windows of train_ids; the learning rate decays along a cosine to lr / 10.
    Returns a TrainingRun; validation loss every `eval_every` steps and after the last."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.1 + 0.45 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    before = torch.get_num_threads()
    if cpu_threads:
        torch.set_num_threads(cpu_threads)
    train_loss, val_loss = [], []
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        for step in range(steps):
            if step % eval_every == 0:
                val_loss.append((step, evaluate_loss(model, val_ids, model.context)))
            batch = random_windows(train_ids, batch_size, model.context + 1, generator)
            train_loss.append(float(train_step(model, optimizer, batch)))
            schedule.step()
        val_loss.append((steps, evaluate_loss(model, val_ids, model.context)))
    finally:
        torch.set_num_threads(before)
    return TrainingRun(train_loss, val_loss, time.perf_counter() - start,
                       time.process_time() - cpu_start)


class GumbelSampler(nn.Module):
    """Wraps a language model so that greedy decoding *samples*: its logits become
    logits / temperature + Gumbel noise, and the argmax of that is a draw from
    softmax(logits / temperature) (the Gumbel-max trick). The noise comes from `generator`,
    so a seeded generator gives a reproducible sample. Same interface as the model."""

    def __init__(self, model, temperature=1.0, generator=None):
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.model, self.temperature, self.generator = model, temperature, generator

    def new_caches(self):
        return self.model.new_caches()

    def forward(self, tokens, caches=None, start=0):
        logits = self.model(tokens, caches=caches, start=start)                # (B, L, V)
        uniform = torch.rand(logits.shape, generator=self.generator, dtype=logits.dtype)
        gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-20)))             # (B, L, V)
        return logits / self.temperature + gumbel.to(logits.device)
