"""The capstone's ablation: the chapter's model trained with multi-head, grouped-query and
multi-query attention (4, 2 and 1 key/value heads for 4 query heads), each with rotary and
with learned absolute positions, on the chapter's corpus, with the chapter's settings.
Writes chapters/data/capstone_ablation.json: for each variant its validation loss (the
chapter's evaluate_loss), its first training losses (tests/test_capstone.py retrains one
variant for two steps and compares), its parameters and the bytes of its KV cache for a
full context of one sequence in float32, measured on the caches and checked against
2 * num_layers * num_kv_heads * head_dim * 4 bytes * context; with its provenance.

Six runs of the chapter's length take about three minutes of CPU time on one thread: too
long for the book's build, which shows the recorded table. Run it from the repository root:

    PYTHONPATH=. .venv/bin/python bench/capstone_ablation.py [--steps N] [--out PATH]
"""
import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solutions.capstone import TransformerBlock, generate, train_step  # noqa: E402
from solutions.capstone_lab import (DEFAULT_TRAIN_STEPS, CharLM, CharTokenizer,  # noqa: E402
                                    read_corpus, split_train_val, train)
from solutions.kv import count_kv_cache_bytes  # noqa: E402

OUT = REPO / "chapters" / "data" / "capstone_ablation.json"
# the chapter's model and run (chapters/08_capstone.ipynb; tests/test_capstone.py checks
# that its cell says the same)
CONFIG = {"context": 64, "d_model": 64, "num_heads": 4, "num_layers": 2, "dropout": 0.1,
          "batch_size": 32, "lr": 3e-3, "seed": 0, "cpu_threads": 1}
VARIANTS = [(attention, kv_heads, positions)
            for positions in ("rotary", "learned")
            for attention, kv_heads in (("MHA", 4), ("GQA", 2), ("MQA", 1))]
FIRST_LOSSES = 5  # training losses recorded per variant
BYTES_PER_VALUE = 4  # float32


class LearnedPositionsBlock(TransformerBlock):
    """The chapter's block without the rotation: the learned-positions variant's, whose
    positions are CharLM's position embeddings, added once at the input."""

    rotary = False


def build(num_kv_heads, positions, config=CONFIG, vocab_size=None):
    """The chapter's CharLM with `num_kv_heads` key/value heads and `positions`, seeded."""
    block = TransformerBlock if positions == "rotary" else LearnedPositionsBlock
    return CharLM(vocab_size, config["context"], config["d_model"], config["num_heads"],
                  config["num_layers"], block, num_kv_heads=num_kv_heads,
                  dropout=config["dropout"], positions=positions, seed=config["seed"])


def corpus():
    """(tokenizer, train ids, validation ids), as the chapter splits the corpus."""
    text = read_corpus()
    tokenizer = CharTokenizer(text)
    train_ids, val_ids = split_train_val(tokenizer.encode(text), val_fraction=0.1)
    return tokenizer, train_ids, val_ids


def run_variant(num_kv_heads, positions, steps, data, config=CONFIG):
    """Train one variant; its TrainingRun and model."""
    tokenizer, train_ids, val_ids = data
    model = build(num_kv_heads, positions, config, tokenizer.vocab_size)
    run = train(model, train_step, train_ids, val_ids, steps=steps,
                batch_size=config["batch_size"], lr=config["lr"], seed=config["seed"],
                cpu_threads=config["cpu_threads"])
    return run, model


def measured_cache_bytes(model, context):
    """Bytes the caches hold after generating up to a full context from a one-token prompt,
    one sequence: every key and value tensor of every layer."""
    caches = model.new_caches()
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, context, dtype=torch.long), caches=caches)
    return sum(c.keys.nbytes + c.values.nbytes for c in caches)


def cache_bytes(config, num_kv_heads):
    """The formula: chapter 6's bytes per token times the context (float32)."""
    head_dim = config["d_model"] // config["num_heads"]
    return count_kv_cache_bytes(config["num_layers"], num_kv_heads, head_dim,
                                BYTES_PER_VALUE) * config["context"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_TRAIN_STEPS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = corpus()
    rows = []
    for attention, kv_heads, positions in VARIANTS:
        run, model = run_variant(kv_heads, positions, args.steps, data)
        measured = measured_cache_bytes(model, CONFIG["context"])
        assert measured == cache_bytes(CONFIG, kv_heads), (measured, kv_heads)
        prompt = data[0].encode("And God said").unsqueeze(0)
        tokens, _ = generate(model, prompt, 40)
        rows.append({"attention": attention, "num_kv_heads": kv_heads, "positions": positions,
                     "parameters": sum(p.numel() for p in model.parameters()),
                     "val_loss": round(run.val_loss[-1][1], 4),
                     "first_losses": run.train_loss[:FIRST_LOSSES],
                     "cache_bytes": measured, "cpu_seconds": round(run.cpu_seconds, 1),
                     "greedy": data[0].decode(tokens[0])})
        print(f"{attention} {positions:7} kv={kv_heads}: val {rows[-1]['val_loss']:.4f}, "
              f"cache {measured:,} B, {run.cpu_seconds:.0f} s CPU", flush=True)
    record = {"provenance": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({platform.system()})",
        "steps": args.steps, "script": "bench/capstone_ablation.py",
        "cache": f"one sequence of {CONFIG['context']} positions, float32"},
        "config": CONFIG, "variants": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
