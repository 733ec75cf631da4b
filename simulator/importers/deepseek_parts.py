"""Config readers shared by the DeepSeek-style families (DeepSeek-V3, Kimi-Linear, the DSA
models): layer numbering, which layers are MoE, and the MLA fields."""

from __future__ import annotations

from typing import Any

from simulator.importers.config_view import ConfigView


def layer_range(count: int) -> list[int]:
    return list(range(1, count + 1))


def deepseek_moe_layers(cfg: ConfigView, count: int, num_experts: int | None) -> list[int]:
    """HF DeepseekV3/KimiLinear rule: 0-based layer i is MoE if i >= first_k_dense_replace and
    i % moe_layer_freq == 0."""
    if not num_experts:
        top_k = cfg.get("num_experts_per_tok", 0)
        if num_experts == 0 and isinstance(top_k, int) and top_k > 0:  # read as dense unsaid
            raise cfg.error("n_routed_experts", f"0 routed experts, each token routed to {top_k}")
        return []
    first_dense = cfg.integer("first_k_dense_replace", 0, minimum=0)
    freq = cfg.integer("moe_layer_freq", 1, minimum=1)
    moe = [i for i in layer_range(count) if i - 1 >= first_dense and (i - 1) % freq == 0]
    if not moe:
        raise cfg.error(
            "first_k_dense_replace", f"{first_dense} (moe_layer_freq {freq}) leaves none of the"
            f" {count} layers MoE, although there are {num_experts} routed experts",
        )  # fmt: skip
    return moe


def mla_fields(cfg: ConfigView) -> dict[str, Any]:
    return {
        "num_heads": cfg.integer("num_attention_heads"),
        "q_lora_rank": cfg.optional_int("q_lora_rank"),
        "kv_lora_rank": cfg.integer("kv_lora_rank"),
        "qk_nope_head_dim": cfg.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": cfg.integer("qk_rope_head_dim"),
        "v_head_dim": cfg.integer("v_head_dim"),
        "output_gate": cfg.boolean("mla_use_output_gate", False),
    }
