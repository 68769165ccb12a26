"""Per-layer structure of a decoder: which token mixer and which feed-forward each layer has.

A layer's *mixer kind* is one of ``MIXER_KINDS``:

- ``full``: causal attention over every earlier token;
- ``sliding``: attention over the ``sliding_window`` most recent tokens (Mistral 7B, Jiang et al.
  2023, sec. 2; Gemma 2/3 local layers; gpt-oss's banded layers);
- ``chunked``: attention inside fixed chunks of ``attention_chunk_size`` tokens (Llama 4's local
  layers, ``modeling_llama4.py``: a token sees only earlier tokens of its own chunk);
- ``nope``: full attention without rotary positions (Llama 4's global layers), priced as full;
- ``linear``: Qwen3-Next's gated DeltaNet (Yang et al. 2024, arXiv:2412.06464), a linear
  attention whose cache is a fixed-size state per sequence (``LinearAttention``);
- ``mamba2``: the Mamba-2 SSD state-space mixer (Dao & Gu 2024, arXiv:2405.21060), a fixed-size
  state per sequence (``Mamba2``);
- ``dsa``: DeepSeek-V3.2 sparse attention: MLA over the ``top_k`` keys that a lightning indexer
  picks (``SparseIndexer``; DeepSeek-V3.2-Exp report, 2025);
- ``none``: no mixer (Nemotron-H's MLP-only layers).

A layer's *FFN kind* is one of ``FFN_KINDS``: ``dense``, ``moe`` or ``none`` (Nemotron-H's
mixer-only layers). Empty ``layer_types`` / ``ffn_types`` on a ``ModelConfig`` derive the kinds
from the older fields exactly as before (``sliding_window`` with ``local_per_global``; the MoE
layout of ``n_dense_layers`` and ``moe_layer_freq``). This module also holds the validation of
those fields, so ``model.py`` stays a plain description; its functions take the ``ModelConfig``
as ``cfg`` (untyped here: ``model.py`` imports this module, not the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import GpuplanError, check_choice, check_positive, shown

MIXER_KINDS = ("full", "sliding", "chunked", "nope", "linear", "mamba2", "dsa", "none")
FFN_KINDS = ("dense", "moe", "none")
TOKEN_CACHE_KINDS = ("full", "sliding", "chunked", "nope", "dsa")  # a cache that grows per token
STATE_KINDS = ("linear", "mamba2")  # a fixed-size state per sequence


def _check_fields(obj, what: str, multiple: tuple[str, str] | None = None) -> None:
    """Every field a positive whole number; with ``multiple=(a, b)``, field a a multiple of b
    (the heads that share one key head or one group)."""
    for field in obj.__dataclass_fields__:
        check_positive(f"{what}: {field}", getattr(obj, field))
    if multiple is not None:
        a, b = multiple
        if getattr(obj, a) % getattr(obj, b):
            raise GpuplanError(f"{what}: {a}={getattr(obj, a)} is not a multiple of "
                               f"{b}={getattr(obj, b)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearAttention:
    """Qwen3-Next's gated DeltaNet layer (config: ``linear_num_key_heads``,
    ``linear_num_value_heads``, ``linear_key_head_dim``, ``linear_value_head_dim``,
    ``linear_conv_kernel_dim``; ``modeling_qwen3_next.py``)."""

    n_key_heads: int
    n_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_fields(self, "linear_attention", multiple=("n_value_heads", "n_key_heads"))

    @property
    def key_dim(self) -> int:
        return self.n_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.n_value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the short causal convolution over q, k and v (``conv_dim = key_dim * 2 +
        value_dim`` in ``Qwen3NextGatedDeltaNet``)."""
        return 2 * self.key_dim + self.value_dim

    @property
    def state_elements(self) -> int:
        """Recurrent state of one sequence: a dk x dv matrix per value head."""
        return self.n_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def conv_state_elements(self) -> int:
        return (self.conv_kernel - 1) * self.conv_channels


@dataclass(frozen=True, slots=True, kw_only=True)
class Mamba2:
    """A Mamba-2 SSD mixer (HF ``mamba2``/``nemotron_h``/``granitemoehybrid``: ``mamba_num_heads``,
    ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``)."""

    n_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    chunk_size: int = 256  # HF Mamba2Config's default

    def __post_init__(self) -> None:
        _check_fields(self, "ssm", multiple=("n_heads", "n_groups"))

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def in_proj_width(self) -> int:
        """in_proj's outputs: z, x, B, C and dt (``2 d_inner + 2 n_groups state + n_heads``)."""
        return 2 * self.d_inner + 2 * self.n_groups * self.state_size + self.n_heads

    @property
    def conv_channels(self) -> int:
        """x, B and C pass the causal convolution: ``d_inner + 2 * n_groups * state_size``."""
        return self.d_inner + 2 * self.n_groups * self.state_size

    @property
    def state_elements(self) -> int:
        """SSM state of one sequence: ``n_heads x head_dim x state_size``."""
        return self.n_heads * self.head_dim * self.state_size

    @property
    def conv_state_elements(self) -> int:
        return (self.conv_kernel - 1) * self.conv_channels


@dataclass(frozen=True, slots=True, kw_only=True)
class SparseIndexer:
    """DeepSeek-V3.2's lightning indexer (config: ``index_n_heads``, ``index_head_dim``,
    ``index_topk``): it scores every earlier token and MLA attends to the ``top_k`` best."""

    n_heads: int
    head_dim: int
    top_k: int

    def __post_init__(self) -> None:
        _check_fields(self, "sparse_indexer")


def derived_layer_kinds(cfg) -> tuple[str, ...]:
    """The mixer kinds that the older fields imply: Gemma's rule, block ``i`` full-attention when
    ``(i + 1) % (local_per_global + 1) == 0``; every block windowed when local_per_global is 0."""
    if cfg.layer_types:
        return cfg.layer_types
    if not cfg.sliding_window:
        return ("full",) * cfg.n_layers
    period = cfg.local_per_global + 1
    return tuple("sliding" if not cfg.local_per_global or (i + 1) % period else "full"
                 for i in range(cfg.n_layers))


def derived_ffn_kind(cfg, layer: int) -> str:
    """DeepSeek's rule (``layer >= first_k_dense_replace and layer % moe_layer_freq == 0``)
    unless ``ffn_types`` names the kinds."""
    if cfg.ffn_types:
        return cfg.ffn_types[layer]
    moe = cfg.is_moe and layer >= cfg.n_dense_layers and layer % cfg.moe_layer_freq == 0
    return "moe" if moe else "dense"


def check_window(cfg) -> None:
    """The sliding-window and chunk sizes (moved from ``model.py``)."""
    for field in ("sliding_window", "local_per_global", "attention_chunk_size"):
        check_positive(f"{cfg.name}: {field}", getattr(cfg, field), allow_zero=True)
    if cfg.sliding_window > cfg.max_seq_len:
        raise GpuplanError(
            f"{cfg.name}: sliding_window={cfg.sliding_window} is larger than the context "
            f"max_seq_len={cfg.max_seq_len}: give a window of at most the context (or 0)")
    if cfg.local_per_global and not cfg.sliding_window:
        raise GpuplanError(f"{cfg.name}: local_per_global={cfg.local_per_global} needs a "
                           "sliding_window > 0")


def check_moe(cfg) -> None:
    """The mixture-of-experts sizes and layout (moved from ``model.py``)."""
    moe_fields = ("top_k", "n_shared_experts", "d_ff_expert", "n_dense_layers")
    for field in (*moe_fields, "n_experts"):
        check_positive(f"{cfg.name}: {field}", getattr(cfg, field), allow_zero=True)
    check_positive(f"{cfg.name}: moe_layer_freq", cfg.moe_layer_freq)
    if not cfg.is_moe:
        require_unset(cfg, "n_experts=0 (dense)", (*moe_fields, "router_score_bias"))
        return
    check_positive(f"{cfg.name}: top_k", cfg.top_k)
    check_positive(f"{cfg.name}: d_ff_expert", cfg.d_ff_expert)
    if cfg.top_k > cfg.n_experts:
        raise GpuplanError(
            f"{cfg.name}: top_k={cfg.top_k} is larger than n_experts={cfg.n_experts}"
        )
    if cfg.n_dense_layers >= cfg.n_layers:
        raise GpuplanError(
            f"{cfg.name}: n_dense_layers={cfg.n_dense_layers} leaves no MoE layer among "
            f"n_layers={cfg.n_layers}; it must be smaller"
        )
    if cfg.n_moe_layers == 0:
        raise GpuplanError(
            f"{cfg.name}: moe_layer_freq={cfg.moe_layer_freq} with "
            f"n_dense_layers={cfg.n_dense_layers} leaves no MoE layer among "
            f"n_layers={cfg.n_layers}"
        )


def check_mla(cfg) -> None:
    """The latent-attention sizes (moved from ``model.py``)."""
    mla_fields = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    for field in (*mla_fields, "kv_lora_rank"):
        check_positive(f"{cfg.name}: {field}", getattr(cfg, field), allow_zero=True)
    if not cfg.is_mla:
        require_unset(cfg, "kv_lora_rank=0 (not MLA)", mla_fields)
        return
    check_positive(f"{cfg.name}: qk_rope_head_dim", cfg.qk_rope_head_dim)
    check_positive(f"{cfg.name}: v_head_dim", cfg.v_head_dim)
    if cfg.n_kv_heads != cfg.n_heads:
        raise GpuplanError(
            f"{cfg.name}: MLA expands its latent into one key and value per query head, "
            f"so n_kv_heads={cfg.n_kv_heads} must equal n_heads={cfg.n_heads}"
        )


def require_unset(cfg, because: str, fields: tuple[str, ...]) -> None:
    """Raise when a field of a feature that is off has been set (e.g. top_k on a dense model)."""
    for field in fields:
        value = getattr(cfg, field)
        if value:
            raise GpuplanError(
                f"{cfg.name}: {field}={shown(value)} is set but {because}; set both or neither"
            )


# what each kind needs: (the test, the field that must be set, what it must be)
_NEEDS = {
    "sliding": (lambda c: c.sliding_window > 0, "sliding_window", "> 0"),
    "chunked": (lambda c: c.attention_chunk_size > 0, "attention_chunk_size", "> 0"),
    "linear": (lambda c: c.linear_attention is not None, "linear_attention", "set"),
    "mamba2": (lambda c: c.ssm is not None, "ssm", "set"),
    "dsa": (lambda c: c.sparse_indexer is not None and c.is_mla,
            "sparse_indexer", "set, with MLA (kv_lora_rank > 0)"),
}


def check_layer_kinds(cfg) -> None:
    """Each kind known, one per layer, and every kind's own fields present."""
    check_window(cfg)
    for field, known in (("layer_types", MIXER_KINDS), ("ffn_types", FFN_KINDS)):
        kinds = getattr(cfg, field)
        if not isinstance(kinds, tuple):
            raise GpuplanError(f"{cfg.name}: {field}={shown(kinds)} is invalid: give a tuple of kinds")
        if kinds and len(kinds) != cfg.n_layers:
            raise GpuplanError(f"{cfg.name}: {field} has {len(kinds)} entries but n_layers="
                               f"{cfg.n_layers}: give one per layer (or none)")
        for i, kind in enumerate(kinds):
            check_choice(f"{cfg.name}: {field}[{i}]", kind, known)
    for kind in sorted(set(cfg.layer_types), key=cfg.layer_types.index):
        test, field, want = _NEEDS.get(kind, (lambda c: True, "", ""))
        if not test(cfg):
            raise GpuplanError(f"{cfg.name}: layer_types has {kind!r} layers, so {field}="
                               f"{getattr(cfg, field)!r} is invalid: it must be {want}")
    if "moe" in cfg.ffn_types and not cfg.is_moe:
        raise GpuplanError(f"{cfg.name}: ffn_types has 'moe' layers but n_experts="
                           f"{cfg.n_experts}: give the experts (n_experts > 0)")


def pattern(kinds: tuple[str, ...]) -> str:
    """A compact layer pattern: the shortest repeating unit, run-length coded, and its count
    ("sliding×1/full×1 ×21"); a leading or trailing remainder is listed after it."""
    n = len(kinds)
    for size in range(1, n + 1):
        unit = kinds[:size]
        reps = n // size
        if unit * reps == kinds[: size * reps] and reps > 1 or size == n:
            rest = kinds[size * reps:]
            if size == 1:
                text = _runs(kinds[:reps])
            else:
                text = _runs(unit) + (f" ×{reps}" if reps > 1 else "")
            return text + (f" + {_runs(rest)}" if rest else "")
    return ""


def _runs(kinds: tuple[str, ...]) -> str:
    out: list[str] = []
    for kind in kinds:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + 1)
        else:
            out.append((kind, 1))
    return "/".join(f"{k}×{c}" for k, c in out)
