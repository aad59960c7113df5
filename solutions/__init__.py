"""Reference solutions of the multi-head attention course, importable from the repo root.

Conventions (the book's glossary): batch first; tokens (B, L, d_model); heads
(B, num_heads, L, head_dim) with head_dim = d_model // num_heads; boolean masks with
True = may attend.
"""
from .attention import (attention_entropy, attention_scores, masked_softmax,
                        scaled_dot_product_attention, stable_softmax)
from .counting import count_flops, count_parameters
from .diversity import (HeadImportance, ablation_importance, head_importance, head_similarity,
                        make_heads_identical, prune_heads, relation_scores)
from .diversity_lab import (RelationScores, TinyAttentionModel, TwoRelationBatch, evaluate,
                            gradient_importance, head_circuit_similarity, head_param_gap,
                            relation_losses, train, two_relation_task)
from .heads import merge_heads, split_heads
from .masks import (causal_mask, from_torch_attn_mask, from_torch_key_padding_mask,
                    padding_mask, to_torch_attn_mask, to_torch_key_padding_mask)
from .mha import HeadWeights, MultiHeadAttention
from .kv import (GroupedQueryAttention, KVCache, cached_attention, count_gqa_parameters,
                 count_kv_cache_bytes, decoding_causal_mask, repeat_kv)
from .positions import LearnedPositions, equivariance_gap, shift_matrix, sinusoidal_positions
from .rotary import apply_rotary, rotary_angles, rotary_cached_attention
from .capstone import TransformerBlock, generate, train_step

__all__ = [
    "attention_scores", "attention_entropy", "scaled_dot_product_attention", "masked_softmax",
    "stable_softmax",
    "split_heads", "merge_heads",
    "padding_mask", "causal_mask", "to_torch_key_padding_mask", "from_torch_key_padding_mask",
    "to_torch_attn_mask", "from_torch_attn_mask",
    "MultiHeadAttention", "HeadWeights",
    "count_parameters", "count_flops",
    "two_relation_task", "TwoRelationBatch", "TinyAttentionModel", "relation_losses",
    "evaluate", "train", "head_param_gap", "RelationScores", "gradient_importance",
    "head_circuit_similarity",
    "make_heads_identical", "relation_scores", "ablation_importance", "head_importance",
    "HeadImportance", "prune_heads", "head_similarity",
    "repeat_kv", "GroupedQueryAttention", "KVCache", "decoding_causal_mask", "cached_attention",
    "count_gqa_parameters", "count_kv_cache_bytes", "equivariance_gap",
    "sinusoidal_positions", "shift_matrix", "LearnedPositions",
    "rotary_angles", "apply_rotary", "rotary_cached_attention",
    "TransformerBlock", "train_step", "generate",
]
