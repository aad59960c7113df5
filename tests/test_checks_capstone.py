"""The capstone's checks (chapters/checks/capstone.py) beyond the catalogue (tests/
test_catalogue.py runs that): tolerances over shapes, seeds and dtypes, the properties that
need no answer (leakage, determinism in eval mode), answers that cannot be hard-coded, and
mistakes outside the catalogue that still get a message saying where to look."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.chapter import Chapter, CheckFailure
from tests.submissions import capstone as capstone_catalogue
from tests.submissions import edit

CHAPTER = Chapter(capstone_catalogue.NOTEBOOK)
check = CHAPTER.check  # chapters/checks/capstone.py, as the notebook imports it
REF = CHAPTER.namespace()
INIT = capstone_catalogue.INIT  # the notebook's class line and reference __init__
ATTEND, FF = capstone_catalogue.ATTEND, capstone_catalogue.FF


def with_cells(**cells):
    return CHAPTER.namespace(cells)


def failure(function, *args, **kwargs):
    with pytest.raises(CheckFailure) as raised:
        function(*args, **kwargs)
    return str(raised.value)


@given(seed=st.integers(0, 10**6), L=st.integers(1, 9),
       heads=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4)]),
       d_ff=st.sampled_from([4, 12, 24]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_the_reference_block_passes_at_any_shape_seed_and_dtype(seed, L, heads, d_ff, dtype):
    num_heads, num_kv_heads = heads
    check.transformer_block(REF["TransformerBlock"], REF["KVCache"], seed=seed, L=L,
                            d_model=4 * num_heads, num_heads=num_heads,
                            num_kv_heads=num_kv_heads, d_ff=d_ff, dtype=dtype)


@given(seed=st.integers(0, 10**6), L=st.integers(1, 8), p=st.sampled_from([0.1, 0.5, 0.9]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_the_reference_step_passes_at_any_shape_seed_and_dtype(seed, L, p, dtype):
    check.train_step(REF["train_step"], seed=seed, L=L, p=p, dtype=dtype)


@given(seed=st.integers(0, 10**6), P=st.integers(1, 5), T=st.integers(1, 6))
def test_the_reference_generation_passes_at_any_length(seed, P, T):
    check.generate(REF["generate"], seed=seed, P=P, num_tokens=T)


def test_a_small_leak_is_caught_by_perturbing_the_future():
    """Not a catalogued mistake: a trace of the last position mixed into every position."""
    ns = with_cells(transformer_block=INIT + ATTEND + '''        x = x + self.drop(a) + 1e-3 * x[:, -1:]
        h = self.norm2(x)
        return x + self.drop(''' + FF + ''')
''')
    message = failure(check.transformer_block, ns["TransformerBlock"], ns["KVCache"])
    assert "future tokens leak" in message and "positions < 3" in message


def test_a_block_with_other_names_is_told_the_interface():
    ns = with_cells(transformer_block=edit(INIT, "self.norm1 =", "self.pre_attention_norm =") +
                    '''
    def forward(self, x, cache=None):
        return x
''')
    message = failure(check.transformer_block, ns["TransformerBlock"], ns["KVCache"])
    assert "norm1.weight is missing" in message and "with the exercise's names" in message


def test_the_block_check_wants_the_classes():
    block = REF["TransformerBlock"](8, 2, 1, 16)
    assert "pass the two classes" in failure(check.transformer_block, block, REF["KVCache"])


def test_hard_coded_answers_fail_the_hidden_calls():
    """A submission that replays the visible test's answers passes it and fails the others."""
    visible = {}

    def recording_generate(model, prompt, num_tokens, use_cache=True):
        out = REF["generate"](model, prompt, num_tokens, use_cache)
        visible.setdefault("out", out)
        return out

    check.generate(recording_generate)
    tokens, logits = visible["out"]
    replay = lambda model, prompt, num_tokens, use_cache=True: (tokens, logits)  # noqa: E731
    assert "never called the model" in failure(check.generate, replay)
    losses = []

    def recording_step(model, optimizer, batch):
        losses.append(REF["train_step"](model, optimizer, batch))
        return losses[-1]

    check.train_step(recording_step)

    def replayed_step(model, optimizer, batch):
        REF["train_step"](model, optimizer, batch)
        return losses[0]

    message = failure(check.train_step, replayed_step, seed=1234, B=2, L=9, vocab_size=5)
    assert "returned the loss" in message


def test_a_step_taken_twice_is_named_by_the_formula():
    ns = with_cells(train_step='''
def train_step(model, optimizer, batch):
    model.train()
    loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    optimizer.step()
    return loss.item()
''')
    message = failure(check.train_step, ns["train_step"])
    assert "the parameters moved by two optimizer steps (optimizer.step() called twice)" \
        in message


def test_generated_tokens_must_be_integers():
    def float_tokens(model, prompt, num_tokens, use_cache=True):
        tokens, logits = REF["generate"](model, prompt, num_tokens, use_cache)
        return tokens.float(), logits

    assert "torch.long" in failure(check.generate, float_tokens)


def test_a_replaced_stand_in_that_steps_before_the_call_is_refused(monkeypatch):
    """The model handed to train_step is built by given(): a replaced factory whose model
    has already taken the step (so that a stub would find the right parameters) is refused
    from the values read back before the call."""
    setup = check._step_setup

    def stepped(params, keep, p, stale, lr, device):
        model, optimizer = setup(params, keep, p, stale, lr, device)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.sub_(lr * parameter.grad)
        return model, optimizer

    monkeypatch.setattr(check, "_step_setup", stepped)
    message = failure(check.train_step, lambda model, optimizer, batch: 0.0)
    assert "malformed data (the model before train_step ran)" in message


def test_a_generation_that_keeps_no_cache_is_told_by_the_caches_contents():
    """use_cache=True with the right tokens but caches the model never filled: the keys read
    back from the caches the model made show it (the values alone cannot)."""
    def no_cache(model, prompt, num_tokens, use_cache=True):
        model.new_caches()  # made, never passed
        return REF["generate"](model, prompt, num_tokens, use_cache=False)

    assert "never given the caches" in failure(check.generate, no_cache)


def test_dropout_missing_on_the_attention_branch_is_named_by_the_formula():
    """Not a catalogued mistake: dropout on the feed-forward branch only. The training-mode
    run under the grader's seeded masks shows which dropout step is missing (issue 20)."""
    ns = with_cells(transformer_block=INIT + ATTEND + '''        x = x + a
        h = self.norm2(x)
        return x + self.drop(''' + FF + ''')
''')
    message = failure(check.transformer_block, ns["TransformerBlock"], ns["KVCache"])
    assert "in training mode" in message and "attention dropout step is left out" in message


def test_a_cache_replaced_when_empty_is_caught_by_the_cached_run():
    """Not a catalogued mistake: `cache or KVCache()` reads an empty KVCache (len 0) as
    false, so the given cache never fills and every call attends over its own positions
    only; the full forward is right, the cached run is not, and the formula names it."""
    ns = with_cells(transformer_block=edit(
        capstone_catalogue.block(capstone_catalogue.REFERENCE_FORWARD),
        "cache = KVCache() if cache is None else cache", "cache = cache or KVCache()"))
    message = failure(check.transformer_block, ns["TransformerBlock"], ns["KVCache"])
    assert "with a cache" in message and "a fresh KVCache() only when cache is None" in message

