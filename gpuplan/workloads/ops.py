"""Operator descriptions: what one kernel computes, its FLOPs and the fewest bytes it must move.

Plain frozen descriptions with no notion of hardware. ``count`` repeats an identical operator
(the experts of an MoE layer, the layers of a stack). Conventions:
- A GEMM multiplies A[m, k] by B[k, n]: ``2 m n k`` FLOPs.
- Attention is a fused (flash) kernel: scores never reach memory (Dao et al. 2022). Forward
  FLOPs are ``2 b h_q s_q s_kv_eff (d_qk + d_v)`` (QK^T and PV); the backward does five such
  products against the forward's two, so 2.5x the forward (Dao 2023, FlashAttention-2, sec. 3.2).
  Under a causal mask the mean key count per query, ``s_kv_eff``, is taken bottom-right aligned.
- Elementwise ops move ``reads + writes`` tensors of ``tokens x hidden`` elements; the counts
  per op and pass are in ``ELEMENTWISE_TENSORS`` and name the tensors in a comment.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.workloads.dtypes import dtype_bytes

# an attention backward's FLOPs over its forward's: flash's (module docstring), and MFU's
FLASH_BWD_FLOPS, MODEL_BWD_FLOPS = 2.5, 2.0
# (tensors read, tensors written) of tokens x hidden elements, per op and pass, for the ideal
# single kernel (what a fusing compiler or a hand-fused kernel moves). The one-byte dropout mask
# is added in ``Elementwise.bytes``; norm weights and per-row statistics are negligible.
ELEMENTWISE_TENSORS: dict[tuple[str, str], tuple[int, int]] = {
    ("rmsnorm", "fwd"): (1, 1),  # x -> y
    ("rmsnorm", "bwd"): (2, 1),  # x, dy -> dx
    ("layernorm", "fwd"): (1, 1),
    ("layernorm", "bwd"): (2, 1),
    ("gelu", "fwd"): (1, 1),
    ("gelu", "bwd"): (2, 1),  # x, dy -> dx
    ("silu_mul", "fwd"): (2, 1),  # gate, up -> h   (hidden = the FFN width)
    ("silu_mul", "bwd"): (3, 2),  # gate, up, dh -> dgate, dup
    ("softmax", "fwd"): (1, 1),
    ("softmax", "bwd"): (2, 1),  # y, dy -> dx
    ("add", "fwd"): (2, 1),  # x, residual -> y
    # a serving engine's fused residual add + RMSNorm (vLLM fused_add_rms_norm or its Inductor
    # form, SGLang/FlashInfer fused_add_rmsnorm): x, residual -> y, the new residual
    ("add_rmsnorm", "fwd"): (2, 2),
    ("add", "bwd"): (0, 0),  # the gradient passes through: no kernel
    ("dropout_add", "fwd"): (2, 1),  # x, residual -> y (+ a one-byte mask)
    ("dropout_add", "bwd"): (1, 1),  # dy (+ mask) -> dx
    ("rope", "fwd"): (1, 1),  # q or k -> rotated (hidden = heads x head_dim)
    ("rope", "bwd"): (1, 1),
    ("copy", "fwd"): (1, 1),  # a layout change or a dtype cast
    ("copy", "bwd"): (1, 1),
    # the structural extras of the Hugging Face families (docs/hf_families.md, "Priced"):
    ("sigmoid_mul", "fwd"): (2, 1),  # out, gate -> out * sigmoid(gate) (Qwen3-Next)
    ("sigmoid_mul", "bwd"): (3, 2),  # out, gate, dy -> dout, dgate
    ("relu2", "fwd"): (1, 1),  # x -> relu(x)^2 (Nemotron-H's squared ReLU)
    ("relu2", "bwd"): (2, 1),  # x, dy -> dx
    ("softcap", "fwd"): (1, 1),  # x -> c tanh(x / c) (Gemma 2's logit soft-capping)
    ("softcap", "bwd"): (2, 1),  # y, dy -> dx (tanh' from the output: 1 - (y/c)^2)
    ("scale", "fwd"): (1, 1),  # x -> x * s, s a scalar or a per-row value (Gemma's embedding)
    ("scale", "bwd"): (1, 1),  # dy -> dy * s
}
# How eager PyTorch runs the same op: (kernels, tensor passes = reads + writes over all of them).
# silu_mul is silu(a) then a multiply; dropout_add is dropout then add; RoPE in rotate-half form
# is neg, cat, two multiplies and an add (RoFormer eq. 34 as Hugging Face writes it); their
# backwards follow autograd's formulas for each piece. Norms, GELU and softmax are one ATen
# kernel each way (plus a weight-gradient reduction for norms).
EAGER_KERNELS: dict[tuple[str, str], tuple[int, int]] = {
    ("rmsnorm", "fwd"): (1, 2),
    ("rmsnorm", "bwd"): (2, 3),
    ("layernorm", "fwd"): (1, 2),
    ("layernorm", "bwd"): (2, 3),
    ("gelu", "fwd"): (1, 2),
    ("gelu", "bwd"): (1, 3),
    ("silu_mul", "fwd"): (2, 5),  # silu: a -> s; mul: s, b -> h
    ("silu_mul", "bwd"): (3, 9),  # dh*b; dh*s; silu_backward(a, ds)
    ("softmax", "fwd"): (1, 2),
    ("softmax", "bwd"): (1, 3),
    ("add", "fwd"): (1, 3),
    ("add_rmsnorm", "fwd"): (2, 5),  # the add (3 passes), then the norm (2)
    ("add", "bwd"): (0, 0),
    ("dropout_add", "fwd"): (2, 5),  # dropout: x -> y (+mask); add: y, r -> out
    ("dropout_add", "bwd"): (1, 2),
    ("rope", "fwd"): (5, 10),  # neg (half in, half out), cat, x*cos, rot*sin, add
    ("rope", "bwd"): (4, 9),  # dy*cos, dy*sin, neg of a half, add into dx
    ("copy", "fwd"): (1, 2),
    ("copy", "bwd"): (1, 2),
    ("sigmoid_mul", "fwd"): (2, 5),  # sigmoid: g -> s; mul: o, s -> y
    ("sigmoid_mul", "bwd"): (3, 9),  # dy*s; dy*o; sigmoid_backward(ds, s)
    # relu then torch.square (pow 2): backward is pow_backward's copy (pow 1), scale and
    # multiply, then threshold_backward (FunctionsManual.cpp)
    ("relu2", "fwd"): (2, 4),
    ("relu2", "bwd"): (4, 10),
    # x / c, tanh, * c (transformers' Gemma2ForCausalLM, vLLM's LogitsProcessor); backward:
    # the two scalings' grad * (1/c) and tanh_backward(grad, y)
    ("softcap", "fwd"): (3, 6),
    ("softcap", "bwd"): (3, 7),
    ("scale", "fwd"): (1, 2),
    ("scale", "bwd"): (1, 2),
}
# Python-level torch calls of the eager version's forward, counted in the record contract's
# layer as the harness writes it (gpuplan/validate/harness/model.py), views and no-op casts
# included (they cost the CPU a dispatch each but launch nothing): RoPE slices twice, negates, concatenates,
# casts cos and sin (no-ops), multiplies twice and adds; silu_mul chunks, applies silu and
# multiplies; the output layout copy is a transpose and a reshape. Backward passes run in
# autograd's C++ engine: one dispatch per kernel.
EAGER_FWD_CALLS: dict[str, int] = {"rope": 9, "silu_mul": 3, "copy": 2, "dropout_add": 2}
QKV_VIEW_CALLS = 7  # splitting the fused q/k/v output, then a view and a transpose of each
ELEMENTWISE_OPS = ("layernorm", "rmsnorm", "gelu", "silu_mul", "softmax", "add", "dropout_add")
# Kernel families of a ``Memory`` op (its ``op``) that library code launches beside the fused
# ones, each priced apart (``hwmodels.efficiency.MEASURED_FRACTION``): TensorIterator's
# unvectorized elementwise kernel (``elementwise_kernel<128, 4>``: strided or mixed-dtype
# operands, e.g. an activation over one half of a chunked tensor, a bf16 tensor times fp32
# weights, a masked_fill); a device-to-device ``cudaMemcpy``; an attention kernel's reads of an
# explicit mask, once per query head; the Triton kernel Inductor generates for ``repeat_kv``'s
# expand and reshape (GQA keys and values copied to every query head ahead of a compiled model's
# masked SDPA call).
UNVECTORIZED = "unvectorized"
MEMCPY = "memcpy"
ATTN_MASK = "attn_mask"
INDUCTOR_COPY = "inductor_copy"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gemm:
    name: str
    m: int
    n: int
    k: int
    dtype: str
    count: int = 1
    # kernels it launches when not one per ``count`` (a grouped GEMM runs ``count`` problems in 1)
    launches: int | None = None

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count

    @property
    def bytes(self) -> float:
        e = dtype_bytes(self.dtype)
        return (self.m * self.k + self.k * self.n + self.m * self.n) * e * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class Attention:
    name: str
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int  # of queries and keys
    v_head_dim: int
    causal: bool
    pass_: str  # "fwd" or "bwd"
    dtype: str
    count: int = 1
    window: int = 0  # sliding window: each query sees at most this many keys (0: all)
    chunk: int = 0  # chunked local attention: a query sees only its own chunk's keys (0: all)
    sinks: bool = False  # a learned sink logit per head joins each row's softmax (gpt-oss)
    # the values are the keys' first ``v_head_dim`` elements, read once with them: MLA decoded
    # in its absorbed form attends over the cached latent, which is both (``kv_elems``)
    shared_kv: bool = False

    @property
    def mean_keys_per_query(self) -> float:
        """Keys each query attends to, on average (bottom-right aligned causal mask), at most
        ``window`` each under a sliding window, its chunk's earlier keys under chunking."""
        if self.chunk:
            return _chunked_keys(self)
        w = self.window
        if not self.causal:
            return float(min(self.seq_kv, w) if w else self.seq_kv)
        past = max(self.seq_kv - self.seq_q, 0)
        if not w:
            return past + (min(self.seq_q, self.seq_kv) + 1) / 2.0
        # query j sees min(past + j, w) keys, j = 1 .. seq_q (a sum in closed form)
        lo, hi = past + 1, past + min(self.seq_q, self.seq_kv)
        rising_hi = min(hi, w)
        rising = (lo + rising_hi) * (rising_hi - lo + 1) / 2.0 if rising_hi >= lo else 0.0
        flat = w * max(0, hi - max(lo, w + 1) + 1)
        return (rising + flat) / (hi - lo + 1)

    @property
    def kv_elems(self) -> int:
        """Elements one cached position holds per KV head: a key and a value, or one latent
        that serves as both (``shared_kv``)."""
        return self.head_dim + (0 if self.shared_kv else self.v_head_dim)

    @property
    def kv_read(self) -> int:
        """Cached positions the kernel reads: all, or the window and the new queries' span."""
        cap = self.window or self.chunk  # a chunk: at most one chunk and the new span
        return min(self.seq_kv, cap + self.seq_q - 1) if cap else self.seq_kv

    @property
    def fwd_flops(self) -> float:
        per_head = 2.0 * self.seq_q * self.mean_keys_per_query * (self.head_dim + self.v_head_dim)
        return per_head * self.batch * self.heads_q * self.count

    @property
    def flops(self) -> float:
        """FLOPs the kernel executes: the flash backward recomputes QK^T (five products)."""
        return self.fwd_flops * (FLASH_BWD_FLOPS if self.pass_ == "bwd" else 1.0)

    @property
    def model_flops(self) -> float:
        """FLOPs the math needs (no recomputation): a backward is twice its forward
        (Narayanan et al. 2021, appendix), the convention of MFU (Chowdhery et al. 2022)."""
        return self.fwd_flops * (MODEL_BWD_FLOPS if self.pass_ == "bwd" else 1.0)

    @property
    def bytes(self) -> float:
        e = dtype_bytes(self.dtype)
        q = self.batch * self.heads_q * self.seq_q * self.head_dim * e
        o = self.batch * self.heads_q * self.seq_q * self.v_head_dim * e
        kv = self.batch * self.heads_kv * self.kv_read * self.kv_elems * e
        lse = self.batch * self.heads_q * self.seq_q * 4  # fp32 log-sum-exp per row
        if self.pass_ == "bwd":  # read q, k, v, o, do, lse; write dq, dk, dv
            return (2 * q + 2 * kv + 2 * o + lse) * self.count
        return (q + kv + o + lse) * self.count


def _chunked_keys(op: Attention) -> float:
    """Mean keys per query of causal chunked attention: the query at 1-based position p sees
    ``(p - 1) mod chunk + 1`` keys (Llama 4's chunked mask, ``modeling_llama4.py``), summed in
    closed form over the new positions ``past + 1 .. seq_kv`` (non-causal: one whole chunk)."""
    c = op.chunk
    if not op.causal:
        return float(min(op.seq_kv, c))

    def upto(n: int) -> float:  # sum over p = 1 .. n
        whole, rest = divmod(n, c)
        return whole * c * (c + 1) / 2.0 + rest * (rest + 1) / 2.0

    past = max(op.seq_kv - op.seq_q, 0)
    n = min(op.seq_q, op.seq_kv)
    return (upto(past + n) - upto(past)) / n if n else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """A chunked linear-recurrence mixer kernel: Qwen3-Next's gated DeltaNet (``kind="linear"``,
    FLA's ``chunk_gated_delta_rule``) or Mamba-2's SSD scan (``kind="mamba2"``,
    ``mamba_chunk_scan_combined``), for ``batch`` sequences of ``seq_q`` new tokens each; one
    token (``seq_q=1``) is the recurrent step of a decode (``fused_recurrent_gated_delta_rule``,
    ``selective_state_update``). Per token and head, with d_k the key (state) width, d_v the value
    (head) width and C = min(chunk, seq_q):

    - linear (Yang et al. 2024, "Gated Delta Networks", arXiv:2412.06464, sec. 3.3, the
      chunkwise WY form): intra-chunk QK^T, KK^T and their products with V and K, 4 C (d_k +
      d_v); the state's use and update (q S, w S, K^T U), 6 d_k d_v;
    - mamba2 (Dao & Gu 2024, arXiv:2405.21060, sec. 6, the SSD algorithm's four steps): the
      diagonal blocks, 2 C (N G / H + P) (C B^T per group, its product with X per head); the
      chunk states and the states' outputs, 4 N P (d_k = N, d_v = P).

    Bytes: ``io_per_token`` elements a token reads and writes, plus each sequence's state
    (``state_elems``, recurrent and convolution) read and written once."""

    name: str
    kind: str  # "linear" | "mamba2"
    batch: int
    seq_q: int
    heads: int
    key_dim: int  # d_k (linear) or the state size N (mamba2)
    value_dim: int  # d_v (linear) or the head dim P (mamba2)
    groups: int  # key heads (linear) or B/C groups (mamba2)
    chunk: int
    io_per_token: int  # elements read and written per token
    state_elems: int  # per sequence (this rank's heads)
    pass_: str
    dtype: str
    state_dtype: str = "bf16"
    count: int = 1

    @property
    def flops_per_token(self) -> float:
        c, dk, dv, h = min(self.chunk, self.seq_q), self.key_dim, self.value_dim, self.heads
        if self.kind == "linear":
            return h * (4.0 * c * (dk + dv) + 6.0 * dk * dv)
        return 2.0 * c * (self.groups * dk + h * dv) + 4.0 * h * dk * dv

    @property
    def fwd_flops(self) -> float:
        return self.flops_per_token * self.batch * self.seq_q * self.count

    @property
    def flops(self) -> float:
        """A backward recomputes the forward's chunk terms and runs its products twice
        (FLA's chunk backward): 2x the forward, as for a GEMM (Narayanan et al. 2021)."""
        return self.fwd_flops * (MODEL_BWD_FLOPS if self.pass_ == "bwd" else 1.0)

    @property
    def model_flops(self) -> float:
        return self.flops

    @property
    def bytes(self) -> float:
        io = self.batch * self.seq_q * self.io_per_token * dtype_bytes(self.dtype)
        state = 2 * self.batch * self.state_elems * dtype_bytes(self.state_dtype)
        return (io + state) * (2 if self.pass_ == "bwd" else 1) * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class Elementwise:
    name: str
    op: str
    tokens: int
    hidden: int
    pass_: str
    dtype: str
    count: int = 1
    impl: str = "fused"  # "fused": one ideal kernel; "eager": as eager PyTorch runs it

    @property
    def flops(self) -> float:
        return 0.0  # negligible next to the bytes; the op is bandwidth-bound

    @property
    def tensor_passes(self) -> int:
        if self.impl == "eager":
            return EAGER_KERNELS[(self.op, self.pass_)][1]
        return sum(ELEMENTWISE_TENSORS[(self.op, self.pass_)])

    @property
    def kernels(self) -> int:
        if self.impl == "eager":
            return EAGER_KERNELS[(self.op, self.pass_)][0] * self.count
        return self.count if self.tensor_passes else 0

    @property
    def host_calls(self) -> int:
        """Torch calls the CPU dispatches for it (eager), else one per kernel."""
        if self.impl == "eager" and self.pass_ == "fwd" and self.op in EAGER_FWD_CALLS:
            return EAGER_FWD_CALLS[self.op] * self.count
        return self.kernels

    @property
    def bytes(self) -> float:
        elems = self.tokens * self.hidden
        extra = elems if self.op == "dropout_add" else 0  # the one-byte keep mask
        return (self.tensor_passes * elems * dtype_bytes(self.dtype) + extra) * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """A pure data-movement kernel given by its bytes: an embedding gather, an optimizer step,
    a KV-cache append, a cross-entropy over the logits."""

    name: str
    op: str  # efficiency class: "embedding", "adamw", "copy", "cross_entropy", ...
    bytes_moved: float
    flops_done: float = 0.0
    count: int = 1
    calls: int = 1  # torch calls that run it (a KV-cache write: select, assign, slice, twice)

    @property
    def host_calls(self) -> int:
        return self.calls * self.count

    @property
    def flops(self) -> float:
        return self.flops_done * self.count

    @property
    def bytes(self) -> float:
        return self.bytes_moved * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    name: str
    op: str  # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv
    world: int
    bytes_per_rank: float  # each rank's input buffer
    count: int = 1
    link: str = "scaleup"  # the link it crosses: scale-up (NVLink) or scale-out (the GPU's NIC)
    # "nccl" (its ring/tree protocols), or a serving engine's all-reduce over peer memory:
    # "one_shot" (each rank reads every peer's buffer and sums) or "two_shot" (a reduce-scatter
    # then an all-gather through peer reads); ``hwmodels.collectives.custom_all_reduce_time``
    kernel: str = "nccl"

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes(self) -> float:
        return self.bytes_per_rank * self.count


Op = Gemm | Attention | Elementwise | Memory | Collective | Scan


def op_class(op: Op) -> str:
    """The kernel class a breakdown groups by."""
    if isinstance(op, Gemm):
        return "gemm"
    if isinstance(op, Attention | Scan):
        return "attention"  # the token mixer
    if isinstance(op, Collective):
        return "communication"
    if isinstance(op, Memory):
        return op.op
    return "elementwise"
