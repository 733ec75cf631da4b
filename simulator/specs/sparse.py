"""Card sections of the sparse-attention families: the DSA indexer and DeepSeek-V4 attention.

``DsaIndexerConfig`` rides on ``MLAConfig.indexer`` (``sparse_mla`` layers: GLM-5, DeepSeek-V3.2):
a lightning indexer scores every cached token with its own small fp8 keys and the MLA attends the
``topk_tokens`` best. ``CompressedAttentionConfig`` is DeepSeek-V4's attention (``csa``, ``hca``
and ``swa_mqa`` layers): one shared 512-dim K=V vector per cache entry (MQA), a 128-token sliding
window in every layer, plus entries that compress ``ratio`` consecutive tokens into one; CSA
layers pick the top-k compressed entries with an indexer, HCA layers attend all of them.
Numbers are the config.json's (``index_n_heads``, ``compress_ratios``, ...; see
``simulator/importers/``).
"""

from __future__ import annotations

from pydantic import PositiveInt, model_validator

from simulator.specs.frozen import Spec


class DsaIndexerConfig(Spec):
    """DeepSeek sparse attention's lightning indexer (config: index_n_heads, index_head_dim,
    index_topk): q from the q latent, one key of ``head_dim`` per token, top ``topk_tokens``."""

    num_heads: PositiveInt
    head_dim: PositiveInt
    topk_tokens: PositiveInt


class CompressedAttentionConfig(Spec):
    """DeepSeek-V4 hybrid attention (compressed sparse + heavily compressed + sliding window).

    Every layer: q = wq_b(norm(wq_a x)) with ``num_heads`` heads of ``head_dim``; one KV vector
    of ``head_dim`` (``rope_head_dim`` of it rotary) shared by all heads as key and value; the
    output goes through a grouped low-rank projection (``o_groups`` groups to ``o_lora_rank``
    each, then to hidden). Layers attend their last ``sliding_window_tokens`` tokens plus,
    ``csa``: the ``index_topk`` best of the entries compressing ``csa_compress_ratio`` tokens
    each (an indexer with ``index_num_heads`` x ``index_head_dim`` scores them), ``hca``: every
    entry compressing ``hca_compress_ratio`` tokens, ``swa_mqa``: nothing more.
    ``residual_streams`` is mHC's hc_mult (the residual is that many hidden-sized copies).
    """

    num_heads: PositiveInt
    head_dim: PositiveInt
    rope_head_dim: PositiveInt
    q_lora_rank: PositiveInt
    o_lora_rank: PositiveInt
    o_groups: PositiveInt
    sliding_window_tokens: PositiveInt
    csa_compress_ratio: PositiveInt
    hca_compress_ratio: PositiveInt
    index_num_heads: PositiveInt
    index_head_dim: PositiveInt
    index_topk: PositiveInt
    residual_streams: PositiveInt = 1

    @model_validator(mode="after")
    def _shapes(self) -> CompressedAttentionConfig:
        if self.num_heads % self.o_groups:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of o_groups {self.o_groups}"
            )
        if self.rope_head_dim >= self.head_dim:
            raise ValueError(
                f"rope_head_dim {self.rope_head_dim} must be below head_dim {self.head_dim}"
            )
        if self.csa_compress_ratio >= self.hca_compress_ratio:
            raise ValueError(
                f"csa_compress_ratio {self.csa_compress_ratio} must be below"
                f" hca_compress_ratio {self.hca_compress_ratio}"
            )
        return self
