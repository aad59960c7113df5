"""Blind set, chapter 8 (the capstone): mistakes written from the exercise text and the
reference solutions alone, by a tester who never read the checks or their messages."""
from tests.heldout import Bug, edit, reference

NOTEBOOK = "08_capstone"

_TB = reference(NOTEBOOK, "transformer_block")
_TS = reference(NOTEBOOK, "train_step")
_GEN = reference(NOTEBOOK, "generate")

CORRECT = {
    # the block's two sublayers as methods; the loss with reshape(-1, V) and the gradients
    # cleared before the forward pass
    "methods_and_reshape": {
        "transformer_block": '''
class TransformerBlock(nn.Module):
    """Pre-RMSNorm decoder block with grouped-query rotary attention and SwiGLU.
    forward(x (B, L, d_model), cache=None) -> (B, L, d_model)."""

    def __init__(self, d_model, num_heads, num_kv_heads, d_ff, dropout=0.0):
        super().__init__()
        self.attn = GroupedQueryAttention(d_model, num_heads, num_kv_heads)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        self.norm1 = nn.RMSNorm(d_model)
        self.norm2 = nn.RMSNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def _attention(self, x, cache):
        if cache is None:
            cache = KVCache()
        return self.drop(rotary_cached_attention(self.attn, self.norm1(x), cache))

    def _feed_forward(self, x):
        h = self.norm2(x)
        return self.drop(self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)))

    def forward(self, x, cache=None):
        x = x + self._attention(x, cache)
        return x + self._feed_forward(x)
''',
        "train_step": '''
def train_step(model, optimizer, batch):
    """One step of next-token prediction on batch (B, L + 1); returns the loss (a float)."""
    model.train()
    optimizer.zero_grad()
    logits = model(batch[:, :-1])                                  # (B, L, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    return float(loss.detach())
''',
    },
    # generation with the prefill before the loop and the mode restored in a finally
    "prefill_first": {
        "generate": '''
@torch.no_grad()
def generate(model, prompt, num_tokens, use_cache=True):
    """Greedy decoding: prompt (B, P) -> (tokens (B, P + num_tokens), logits (B, num_tokens, V))."""
    mode = model.training
    model.eval()
    try:
        tokens = prompt
        all_logits = []
        if num_tokens == 0:
            return tokens, prompt.new_zeros(0)
        if use_cache:
            caches = model.new_caches()
            last = model(prompt, caches=caches)[:, -1]
        else:
            last = model(tokens)[:, -1]
        for step in range(num_tokens):
            all_logits.append(last)
            next_token = last.argmax(dim=-1)[:, None]               # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            if step == num_tokens - 1:
                break
            if use_cache:
                last = model(next_token, caches=caches, start=tokens.shape[1] - 1)[:, -1]
            else:
                last = model(tokens)[:, -1]
        return tokens, torch.stack(all_logits, dim=1)
    finally:
        model.train(mode)
''',
    },
}

BUGS = {
    # normalises after the residual addition (post-norm) instead of before the sublayer
    "tb_post_norm": Bug(
        cells={"transformer_block": edit(edit(edit(_TB, "        h = self.norm1(x)                                                 # (B, L, D)\n", ""),
                                                   "attended = rotary_cached_attention(self.attn, h, cache)           # (B, L, D)\n        x = x + self.drop(attended)                                       # (B, L, D)\n        h = self.norm2(x)                                                 # (B, L, D)\n        gated = F.silu(self.gate_proj(h)) * self.up_proj(h)              # (B, L, d_ff)\n        return x + self.drop(self.down_proj(gated))                       # (B, L, D)",
                                                   "attended = rotary_cached_attention(self.attn, x, cache)\n        x = self.norm1(x + self.drop(attended))\n        gated = F.silu(self.gate_proj(x)) * self.up_proj(x)\n        return self.norm2(x + self.drop(self.down_proj(gated)))"),
                                          "        # a fresh cache makes the call full causal self-attention at positions 0 .. L - 1\n", "")},
        fails=["test_transformer_block"],
        diagnosis=r"(?i)post.?norm|pre.?norm|norm\w* (after|before) (the )?(residual|addition|sum|sublayer)|(after|before) (adding|the addition)|normali[sz]\w* (the )?(residual )?stream"),
    # adds the attention output to the normalised h instead of the raw residual stream x
    "tb_residual_from_normed": Bug(
        cells={"transformer_block": edit(_TB, "x = x + self.drop(attended)", "x = h + self.drop(attended)")},
        fails=["test_transformer_block"],
        diagnosis=r"(?i)residual|raw x|un-?normali[sz]ed|stream (itself|untouched)|add\w* to (the )?(normali[sz]ed|norm1)|\bh \+|instead of x\b"),
    # puts SiLU on the up projection instead of the gate projection
    "tb_silu_on_up": Bug(
        cells={"transformer_block": edit(_TB, "F.silu(self.gate_proj(h)) * self.up_proj(h)", "self.gate_proj(h) * F.silu(self.up_proj(h))")},
        fails=["test_transformer_block"],
        diagnosis=r"(?i)(silu|activation)\w*.{0,40}(up_proj|gate_proj|wrong (projection|branch|matrix))|(up_proj|gate_proj).{0,40}(silu|activation)|swapp\w* .{0,30}(gate|up)|gate and up"),
    # applies dropout to the sum x + sublayer(x) instead of to the sublayer's output
    "tb_dropout_on_stream": Bug(
        cells={"transformer_block": edit(_TB, "x = x + self.drop(attended)", "x = self.drop(x + attended)")},
        fails=["test_transformer_block"],
        diagnosis=r"(?i)dropout.{0,60}(sublayer'?s? output|residual|stream|sum|x \+|whole|before (it is )?add)|drop\w* (the )?(residual|stream|sum)"),
    # passes cache=None straight on instead of a fresh KVCache()
    "tb_no_fresh_cache": Bug(
        cells={"transformer_block": edit(_TB, "cache = KVCache() if cache is None else cache", "pass")},
        fails=["test_transformer_block"],
        diagnosis=r"(?i)KVCache\(\)|fresh (cache|KVCache)|empty (cache|KVCache)|cache (is |=)?\s*None|new (cache|KVCache)|without a cache"),
    # forgets model.train(): after an evaluation dropout stays off while training
    "ts_no_train_mode": Bug(
        cells={"train_step": edit(_TS, "    model.train()\n", "")},
        fails=["test_train_step"],
        diagnosis=r"(?i)train(ing)? mode|model\.train\(\)|eval(uation)? mode|dropout.{0,40}(off|not (active|on)|inactive)"),
    # scores each position on its own token: the targets are not shifted by one
    "ts_targets_not_shifted": Bug(
        cells={"train_step": edit(_TS, "inputs, targets = batch[:, :-1], batch[:, 1:]", "inputs, targets = batch[:, :-1], batch[:, :-1]")},
        fails=["test_train_step"],
        diagnosis=r"(?i)shift|next (token|character)|batch\[:, ?1:\]|targets?.{0,40}(the inputs?|same as)|predict\w* (the )?(current|same|itself|its own)|one position (ahead|later)|off by one"),
    # never clears the gradients: each step adds to the previous step's gradients
    "ts_no_zero_grad": Bug(
        cells={"train_step": edit(_TS, "    optimizer.zero_grad()\n", "")},
        fails=["test_train_step"],
        diagnosis=r"(?i)zero_grad|accumulat|old gradients|clear\w* (the )?(old )?gradients|gradients? (add up|pile|build)"),
    # leaves the model in eval mode instead of giving it back in the mode it had
    "gen_mode_not_restored": Bug(
        cells={"generate": edit(_GEN, "    model.train(was_training)\n", "")},
        fails=["test_generate"],
        diagnosis=r"(?i)\bmode\b|restor|give (it )?back|model\.training|\.train\("),
    # picks each new token from the first position's logits instead of the last one's
    "gen_first_position_logits": Bug(
        cells={"generate": edit(_GEN, "last = logits[:, -1]", "last = logits[:, 0]")},
        fails=["test_generate"],
        diagnosis=r"(?i)last position|logits\[:, ?-1\]|first position|position 0|\[:, ?0\]|newest position"),
    # back-propagates but never calls optimizer.step(): the weights do not move
    "ts_no_optimizer_step": Bug(
        cells={"train_step": edit(_TS, "    optimizer.step()\n", "")},
        fails=["test_train_step"],
        diagnosis=r"(?i)optimizer\.step|step\(\)|(no|never|not) (take|took|taken|updat)|parameters? (unchanged|did not change|not updated|did not move)|no update"),
    # with the cache, feeds the whole sequence again at every step instead of the last token
    "gen_cache_whole_sequence": Bug(
        cells={"generate": edit(_GEN, "logits = model(tokens[:, -1:], caches=caches, start=tokens.shape[1] - 1)", "logits = model(tokens, caches=caches, start=tokens.shape[1] - 1)")},
        fails=["test_generate"],
        diagnosis=r"(?i)only the (last|newest|new) token|tokens\[:, ?-1:\]|whole sequence|every token again|(appended|cached|fed) (twice|again)|re-?feed"),
}
