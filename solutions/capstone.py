"""The capstone: a modern decoder block built from the course's parts (chapter 3's layer
generalised to chapter 6's grouped keys/values, chapter 7's rotary positions in every head,
chapter 6's KV cache), pre-RMSNorm with a SwiGLU feed-forward; one training step of a causal language
model; and greedy generation with and without the cache.

Shape letters: B batch, L sequence length, D d_model, F d_ff, V vocab_size, P prompt
length, T tokens generated.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv import GroupedQueryAttention, KVCache, cached_attention
from .rotary import rotary_cached_attention


class TransformerBlock(nn.Module):
    """Pre-RMSNorm decoder block (Llama's order) of grouped-query attention with rotary
    positions and a SwiGLU feed-forward:

        x = x + drop(attn(norm1(x)))                      rotary, causal, grouped keys/values
        x = x + drop(down_proj(silu(gate_proj(h)) * up_proj(h))),   h = norm2(x)

    TransformerBlock(d_model, num_heads, num_kv_heads, d_ff, dropout=0.0): norm1 and norm2
    are nn.RMSNorm(d_model); attn is chapter 6's GroupedQueryAttention(d_model, num_heads,
    num_kv_heads); gate_proj and up_proj are nn.Linear(d_model, d_ff, bias=False), down_proj
    nn.Linear(d_ff, d_model, bias=False); drop is nn.Dropout(dropout), applied to each
    sublayer's output before it joins the residual stream (training mode only).
    forward(x (B, L, D), cache=None) -> (B, L, D). Without a cache, causal self-attention
    over positions 0 .. L - 1; with one (chapter 6's KVCache), x holds the positions
    len(cache) .. len(cache) + L - 1, which is where rotary turns their queries and keys.
    """

    rotary = True  # bench/capstone_ablation.py's learned-positions variant sets it False

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, dropout=0.0):
        super().__init__()
        self.norm1 = nn.RMSNorm(d_model)
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads)
        self.norm2 = nn.RMSNorm(d_model)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cache=None):
        h = self.norm1(x)                                                 # (B, L, D)
        # a fresh cache makes the call full causal self-attention at positions 0 .. L - 1
        cache = KVCache() if cache is None else cache
        attend = rotary_cached_attention if self.rotary else cached_attention
        attended = attend(self.attn, h, cache)                            # (B, L, D)
        x = x + self.drop(attended)                                       # (B, L, D)
        h = self.norm2(x)                                                 # (B, L, D)
        gated = F.silu(self.gate_proj(h)) * self.up_proj(h)              # (B, L, F)
        return x + self.drop(self.down_proj(gated))                       # (B, L, D)


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
