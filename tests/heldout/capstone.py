"""Held-out set, chapter 7 (the capstone): mistakes written before any check was changed for
them, each absent from tests/submissions/capstone.py.

Solution cells: transformer_block, train_step, generate.

The block's entries were written against the first exercise (a pre-LayerNorm block around
chapter 3's layer, __init__ given) and rewritten mechanically for the new one (the student's
whole pre-RMSNorm block, rotary grouped-query attention, SwiGLU): the same mistakes in the
new code's names, and where the old code is gone (no mask in the block any more), the same
kind of mistake against the new code, written before any check answered them.
"""
from . import Bug, edit, reference

NOTEBOOK = "08_capstone"

_BLOCK = reference(NOTEBOOK, "transformer_block")
_STEP = reference(NOTEBOOK, "train_step")
_GENERATE = reference(NOTEBOOK, "generate")
_FORWARD = _BLOCK[_BLOCK.index("    def forward"):]


def _block(forward):
    """The block cell with `forward` (the indented method) in place of the reference's."""
    return _BLOCK.replace(_FORWARD, forward)


CORRECT = {
    # the norms through F.rms_norm with the modules' parameters and the fresh cache made
    # on its own line; the loss on (B, V, L) logits; prefill outside the loop.
    "functional_norm_class_axis_loss": {
        "transformer_block": _block('''    def forward(self, x, cache=None):
        h = F.rms_norm(x, x.shape[-1:], self.norm1.weight, self.norm1.eps)
        if cache is None:
            cache = KVCache()
        a = rotary_cached_attention(self.attn, h, cache)
        x = x + self.drop(a)
        h = F.rms_norm(x, x.shape[-1:], self.norm2.weight, self.norm2.eps)
        return x + self.drop(self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)))
'''),
        "train_step": '''
def train_step(model, optimizer, batch):
    model.train()
    logits = model(batch[:, :-1])                         # (B, L, V)
    loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:])   # classes on axis 1
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss)
''',
        "generate": '''
@torch.no_grad()
def generate(model, prompt, num_tokens, use_cache=True):
    training = model.training
    model.eval()
    try:
        caches = model.new_caches() if use_cache else None
        tokens = prompt
        steps = []
        logits = model(tokens, caches=caches) if use_cache else model(tokens)
        for _ in range(num_tokens):
            steps.append(logits[:, -1])
            nxt = logits[:, -1].argmax(dim=-1)[:, None]
            tokens = torch.cat([tokens, nxt], dim=1)
            if len(steps) == num_tokens:
                break
            if use_cache:
                logits = model(nxt, caches=caches, start=tokens.shape[1] - 1)
            else:
                logits = model(tokens)
        return tokens, torch.stack(steps, dim=1)
    finally:
        model.train(training)
''',
    },
    # the sublayers through a helper; log_softmax + nll_loss, gradients cleared first.
    "sublayer_helper_nll": {
        "transformer_block": _block('''    def forward(self, x, cache=None):
        def attend(h):
            return rotary_cached_attention(self.attn, h, KVCache() if cache is None else cache)

        def feed_forward(h):
            return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

        for norm, sublayer in ((self.norm1, attend), (self.norm2, feed_forward)):
            x = x + self.drop(sublayer(norm(x)))
        return x
'''),
        "train_step": '''
def train_step(model, optimizer, batch):
    optimizer.zero_grad(set_to_none=True)
    model.train()
    logits = model(batch[:, :-1])
    log_probs = F.log_softmax(logits, dim=-1)
    loss = F.nll_loss(log_probs.reshape(-1, log_probs.shape[-1]), batch[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    return loss.detach().item()
''',
    },
}


def _block_bug(old, new, diagnosis, notes=""):
    return Bug(cells={"transformer_block": edit(_BLOCK, old, new)},
               fails=["test_transformer_block"], diagnosis=diagnosis, notes=notes)


def _step_bug(old, new, diagnosis, notes=""):
    return Bug(cells={"train_step": edit(_STEP, old, new)},
               fails=["test_train_step"], diagnosis=diagnosis, notes=notes)


def _generate_bug(old, new, diagnosis, notes=""):
    return Bug(cells={"generate": edit(_GENERATE, old, new)},
               fails=["test_generate"], diagnosis=diagnosis, notes=notes)


BUGS = {
    # --- TransformerBlock
    # A size from the wrong named quantity (was: the mask sized by the batch axis; the block
    # has no mask now): the norms built over d_ff features instead of d_model.
    "block_norm_sized_by_d_ff": _block_bug(
        "        self.norm1 = nn.RMSNorm(d_model)\n", "        self.norm1 = nn.RMSNorm(d_ff)\n",
        r"(?i)norm\d?\.weight.{0,80}(shape|d_model|\(\d+,\))|d_ff"),
    # An extra norm on the block's output.
    "block_normalises_output": _block_bug(
        "        return x + self.drop(self.down_proj(gated))",
        "        return self.norm2(x + self.drop(self.down_proj(gated)))",
        r"(?i)(norm\w*|norm2).{0,40}(output|result|after the residual)|post-norm|extra (RMS)?Norm"),
    # The cached path attends over x, not norm1(x) (the full path is right).
    "block_cache_path_unnormalised": Bug(cells={"transformer_block": _block('''    def forward(self, x, cache=None):
        h = self.norm1(x)
        if cache is None:
            attended = rotary_cached_attention(self.attn, h, KVCache())
        else:
            attended = rotary_cached_attention(self.attn, x, cache)
        x = x + self.drop(attended)
        h = self.norm2(x)
        return x + self.drop(self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)))
''')}, fails=["test_transformer_block"],
        diagnosis=r"(?i)cach\w*.{0,80}(norm1|normali[sz]ed|x instead)|norm1\(x\).{0,80}cach"),
    # The causal mask with its diagonal removed: no query sees its own token (the full path
    # through chapter 6's layer and a hand-made mask; the cached path is right).
    "block_mask_excludes_diagonal": Bug(cells={"transformer_block": _block('''    def forward(self, x, cache=None):
        h = self.norm1(x)
        if cache is None:
            L = x.shape[1]
            past = torch.ones(L, L, dtype=torch.bool, device=x.device).tril(-1)  # strictly the past
            attended = self.attn(h, mask=past)
        else:
            attended = rotary_cached_attention(self.attn, h, cache)
        x = x + self.drop(attended)
        h = self.norm2(x)
        return x + self.drop(self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)))
''')}, fails=["test_transformer_block"],
        diagnosis=r"(?i)diagonal|its own (token|position|key)|itself|off by one"),
    # The second residual adds the block's input, not the output of the first sublayer.
    "block_second_residual_from_input": _block_bug(
        "        x = x + self.drop(attended)                                       # (B, L, D)\n"
        "        h = self.norm2(x)                                                 # (B, L, D)\n",
        "        y = x + self.drop(attended)\n"
        "        h = self.norm2(y)\n",
        r"(?i)residual.{0,80}(block's input|input x|attention('s)? output|first sublayer)|attention output is lost"),

    # --- train_step
    # Logits flattened batch-major, targets time-major: the pairs no longer line up.
    "loss_flatten_mismatch": _step_bug(
        "targets.flatten())", "targets.transpose(0, 1).flatten())",
        r"(?i)flatten\w*.{0,60}(order|line up|same way)|targets.{0,60}(order|transpos)|misaligned|axis order"),
    # nll_loss given logits (it wants log-probabilities).
    "nll_loss_on_logits": _step_bug(
        "loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())",
        "loss = F.nll_loss(logits.flatten(0, 1), targets.flatten())",
        r"(?i)log[- _]?softmax|log-probab|nll_loss|cross_entropy"),
    # step() before backward(): the step uses the zeroed gradients.
    "step_before_backward": _step_bug(
        "    loss.backward()\n    optimizer.step()\n", "    optimizer.step()\n    loss.backward()\n",
        r"(?i)step\(\) before|before (loss\.)?backward|after (loss\.)?backward|order|did not change"),
    # The loss returned as a tensor (with its graph), not a number.
    "train_returns_tensor": _step_bug(
        "    return loss.item()", "    return loss",
        r"(?i)\.item\(\)|a (Python )?(float|number)|tensor",
        "the check turns a 0-d tensor into a number where the exercise asks for one"),

    # --- generate
    # Sampling instead of greedy decoding.
    "generate_samples": _generate_bug(
        "tokens = torch.cat([tokens, last.argmax(-1, keepdim=True)], dim=1)",
        "tokens = torch.cat([tokens, torch.multinomial(last.softmax(-1), 1)], dim=1)",
        r"(?i)greedy|argmax|sampl|random"),
    # The newest token fed as (B,) instead of (B, 1).
    "generate_last_token_1d": _generate_bug(
        "model(tokens[:, -1:], caches=caches,", "model(tokens[:, -1], caches=caches,",
        r"(?i)tokens\[:, -1:\]|\(B, 1\)|keep (the|its) (sequence )?axis|1-D|one axis"),
    # The logits stacked time-major: (num_tokens, B, V).
    "generate_logits_time_major": _generate_bug(
        "torch.stack(chosen, dim=1)", "torch.stack(chosen)",
        r"(?i)\(num_tokens, B, V\)|time|dim=1|transpos|swap|axes? (0 and 1|swapped)"),
}
