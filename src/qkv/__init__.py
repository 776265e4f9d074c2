"""QKV: attention mechanisms written to be read, and proven against PyTorch."""

from qkv.block import TransformerBlock
from qkv.cache import KVCache, streaming_window
from qkv.classic import AdditiveAttention, LuongAttention
from qkv.dispatch import attention, select_backend
from qkv.distributed import ring_attention, ring_schedule
from qkv.efficient import (
    PerformerFeatures,
    axial_attention,
    axial_mask,
    block_layout,
    block_sparse_attention,
    linear_attention,
    linear_attention_weights,
    linformer_attention,
    linformer_projection,
    sliding_window_attention,
    sparse_mask,
)
from qkv.flex import block_mask, flex_attention
from qkv.functional import attention_weights, scaled_dot_product_attention
from qkv.gpt import GPT, GPTConfig, generate, next_token_probabilities
from qkv.kernels import (
    decode_attention,
    flash_attention,
    flash_attention_varlen,
)
from qkv.masks import (
    additive_to_keep,
    causal_mask,
    document_mask,
    keep_to_additive,
    keep_to_key_padding,
    key_padding_to_keep,
    padding_mask,
    sliding_window_mask,
)
from qkv.mla import MultiHeadLatentAttention
from qkv.multihead import MultiHeadAttention
from qkv.paged import PagedKVCache, paged_attention
from qkv.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_positions,
)
from qkv.recurrent import gated_delta_rule
from qkv.rope_scaling import rope_frequencies
from qkv.speculative import SpeculativeStats, speculative_generate
from qkv.topk import indexer_scores, topk_attention, topk_indices, topk_mask

__all__ = [
    "GPT",
    "AdditiveAttention",
    "GPTConfig",
    "KVCache",
    "LuongAttention",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "PagedKVCache",
    "PerformerFeatures",
    "SpeculativeStats",
    "TransformerBlock",
    "additive_to_keep",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "attention",
    "attention_weights",
    "axial_attention",
    "axial_mask",
    "block_layout",
    "block_mask",
    "block_sparse_attention",
    "causal_mask",
    "decode_attention",
    "document_mask",
    "flash_attention",
    "flash_attention_varlen",
    "flex_attention",
    "gated_delta_rule",
    "generate",
    "indexer_scores",
    "keep_to_additive",
    "keep_to_key_padding",
    "key_padding_to_keep",
    "linear_attention",
    "linear_attention_weights",
    "linformer_attention",
    "linformer_projection",
    "next_token_probabilities",
    "padding_mask",
    "paged_attention",
    "ring_attention",
    "ring_schedule",
    "rope_frequencies",
    "scaled_dot_product_attention",
    "select_backend",
    "sinusoidal_positions",
    "sliding_window_attention",
    "sliding_window_mask",
    "sparse_mask",
    "speculative_generate",
    "streaming_window",
    "topk_attention",
    "topk_indices",
    "topk_mask",
]
