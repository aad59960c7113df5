"""Chapter 7, the capstone: a pre-LayerNorm Transformer block built from chapter 3's
MultiHeadAttention and chapter 4's causal mask, one training step of a causal language
model, and greedy generation with and without chapter 6's KV cache.

Shape letters: B batch, L sequence length, D d_model, V vocab_size, P prompt length,
T tokens generated.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv import cached_attention
from .masks import causal_mask
from .mha import MultiHeadAttention


class TransformerBlock(nn.Module):
    """Pre-LayerNorm decoder block (GPT-2's order): x + attn(ln1(x)), then + ff(ln2(.)).

    TransformerBlock(d_model, num_heads, d_ff, dropout=0.0): `dropout` is both the
    attention dropout (on the weights, inside MultiHeadAttention) and the dropout on each
    branch before it joins the residual stream; both act only in training mode.
    forward(x (B, L, D), cache=None) -> (B, L, D). Without a cache, causal self-attention
    over x; with one (chapter 6's KVCache), x holds the positions after the cached ones.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cache=None):
        h = self.ln1(x)                                                   # (B, L, D)
        if cache is None:
            mask = causal_mask(x.shape[1], device=x.device)               # (L, L)
            a, _ = self.attn(h, h, h, mask=mask)                          # (B, L, D)
        else:
            a = cached_attention(self.attn, h, cache)                     # (B, L, D)
        x = x + self.drop(a)                                              # (B, L, D)
        return x + self.drop(self.ff(self.ln2(x)))                        # (B, L, D)


def train_step(model, optimizer, batch):
    """One optimisation step of next-token prediction; returns the loss (a float).

    batch (B, L + 1) long: the model reads batch[:, :-1] and is scored on predicting
    batch[:, 1:], position by position. model(tokens (B, L)) -> logits (B, L, V), raw
    scores (F.cross_entropy applies the log-softmax itself). Dropout is on (train mode).
    """
    if not isinstance(batch, torch.Tensor) or batch.dim() != 2 or batch.shape[1] < 2:
        raise ValueError("batch must be a (B, L + 1) tensor of token ids with L >= 1, got "
                         f"{getattr(batch, 'shape', type(batch).__name__)}")
    model.train()
    inputs, targets = batch[:, :-1], batch[:, 1:]                         # (B, L) each
    logits = model(inputs)                                                # (B, L, V)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def generate(model, prompt, num_tokens, use_cache=True):
    """Greedy decoding: append `num_tokens` tokens, each the argmax of the next-token logits.

    prompt (B, P) long, P >= 1. model(tokens, caches=None, start=0) -> (B, L, V), with
    model.new_caches() giving one empty cache per block. Returns (tokens (B, P + num_tokens),
    the logits each new token was chosen from (B, num_tokens, V)). With use_cache, the prompt
    runs once (prefill) and every later step feeds only the newest token at position
    start = the number of positions already cached; without, every step reruns the whole
    sequence. Both give the same tokens. Runs in eval mode (no dropout) and restores the mode.
    """
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError("prompt must be a (B, P) tensor of token ids with P >= 1, got "
                         f"{getattr(prompt, 'shape', type(prompt).__name__)}")
    was_training = model.training
    model.eval()
    tokens, chosen = prompt, []
    caches = model.new_caches() if use_cache else None
    try:
        for step in range(num_tokens):
            if use_cache:
                new = tokens if step == 0 else tokens[:, -1:]             # (B, P) then (B, 1)
                logits = model(new, caches=caches, start=tokens.shape[1] - new.shape[1])
            else:
                logits = model(tokens)                                    # (B, P + step, V)
            last = logits[:, -1]                                          # (B, V)
            chosen.append(last)
            tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], dim=1)
    finally:
        model.train(was_training)
    vocab = chosen[0].shape[-1] if chosen else 0
    empty = prompt.new_zeros((prompt.shape[0], 0, vocab), dtype=torch.float32)
    # (B, P + num_tokens), (B, num_tokens, V)
    return tokens, torch.stack(chosen, dim=1) if chosen else empty
