"""Two mixture-of-experts decoders in plain PyTorch, at toy sizes, traced as
a user would, with the routing written so that every shape is static:
capacity-based dispatch as GShard and Switch Transformer compute it, each
sequence a routing group.

moe_models.py deepseek|mixtral MODEL.pt BATCHES.safetensors STEPS [BATCH]

- deepseek: DeepSeek-V2's decoder: multi-head latent attention (keys and
  values from a low-rank latent under its own RMS norm, a decoupled rotary
  key shared by the heads), the first layer a dense SwiGLU MLP, the other
  layers DeepSeekMoE: routed experts chosen by top-k of the softmax scores
  (weights not renormalised, times a routed scaling factor) plus shared
  experts every token passes through, and the sequence-wise load-balancing
  loss alpha * sum_e f_e P_e added to the language-model loss;
- mixtral: Mixtral's decoder: grouped-query attention with rotary
  embeddings, RMS norms, a sparse MoE block in every layer: top-2 of the
  router logits, their softmax as weights, SwiGLU experts, and the Switch
  load-balancing loss.

Routing (`route`): the router picks k experts per token; a token's choices
are ranked first choices of the whole group first, then second choices,
each in token order; a choice whose position in its expert's buffer
(a cumulative sum over the group) reaches the capacity
ceil(capacity_factor * k * S / E) is dropped, as in GShard: the token
then gets nothing from that expert (the residual path carries it). The
experts' weights are batched, [E, ...], one tensor per projection, and the
dispatched tokens [E, B * C, D] go through them with batched products.

Every model returns (logits, loss). The batches file holds, per step,
`input_ids` and `labels` [STEPS, B, 16] (the models shift the labels). One
batch is repeated every step. B = 4 unless given; the trace is at batch 4
(a pipeline's step of micro-batches reads B = 4 x micro-batches).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import merak_safetensors  # noqa: E402
import merak_trace  # noqa: E402

SEQ = 16


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotary_tables(dim, seq, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    t = torch.arange(seq).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x, cos, sin):
    """x [B, H, S, D]; cos, sin [S, D]."""
    return x * cos + rotate_half(x) * sin


def causal_mask(seq):
    return torch.full((seq, seq), float("-inf")).triu(1)


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def route(scores, k, capacity):
    """Capacity-based top-k dispatch of one group per batch row.

    scores [B, S, E] (what the top-k is taken of) -> (top values [B, S, k],
    dispatch [B, S, E, C] of 0/1, the experts chosen [B, S, k, E] as 0/1).
    """
    b, s, e = scores.shape
    top_v, top_i = torch.topk(scores, k, dim=-1)
    chosen = F.one_hot(top_i, e)  # [B, S, k, E], int64
    # Priority: every first choice of the group, then every second choice.
    by_rank = chosen.permute(0, 2, 1, 3).reshape(b, k * s, e)
    position = torch.cumsum(by_rank, dim=1) - 1
    position = (position * by_rank).sum(-1)  # [B, k*S]: slot in its expert
    slots = torch.arange(capacity)
    # A position at or past the capacity matches no slot: the choice drops.
    in_slot = (position.unsqueeze(-1) == slots).to(scores.dtype)
    dispatch = by_rank.to(scores.dtype).unsqueeze(-1) * in_slot.unsqueeze(2)
    dispatch = dispatch.reshape(b, k, s, e, capacity).permute(0, 2, 1, 3, 4)
    return top_v, dispatch, chosen  # dispatch [B, S, k, E, C]


class Experts(nn.Module):
    """E SwiGLU experts with batched weights [E, D, H], [E, H, D]."""

    def __init__(self, num, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Parameter(torch.randn(num, dim, hidden) * 0.02)
        self.up_proj = nn.Parameter(torch.randn(num, dim, hidden) * 0.02)
        self.down_proj = nn.Parameter(torch.randn(num, hidden, dim) * 0.02)

    def forward(self, tokens):
        """tokens [E, N, D] -> [E, N, D]."""
        h = F.silu(torch.matmul(tokens, self.gate_proj)) * torch.matmul(
            tokens, self.up_proj)
        return torch.matmul(h, self.down_proj)


def run_experts(experts, x, dispatch, weights):
    """x [B, S, D]; dispatch [B, S, k, E, C] 0/1; weights [B, S, k] ->
    sum over the token's kept choices of weight * expert(x)."""
    b, s, d = x.shape
    e, c = dispatch.shape[3], dispatch.shape[4]
    mask = dispatch.sum(2)  # [B, S, E, C]
    combine = (dispatch * weights[:, :, :, None, None]).sum(2)
    tokens = torch.matmul(mask.reshape(b, s, e * c).transpose(1, 2), x)
    tokens = tokens.reshape(b, e, c, d).permute(1, 0, 2, 3).reshape(
        e, b * c, d)
    out = experts(tokens)
    out = out.reshape(e, b, c, d).permute(1, 0, 2, 3).reshape(b, e * c, d)
    return torch.matmul(combine.reshape(b, s, e * c), out)


def balance_loss(probs, chosen, alpha):
    """Sequence-wise load-balancing loss: alpha * sum_e f_e * P_e, f_e the
    share of the group's k * S choices that went to e, times E, P_e the
    mean router probability of e; averaged over the batch."""
    b, s, k, e = chosen.shape
    f = chosen.sum((1, 2)).to(probs.dtype) * (e / (k * s))
    p = probs.mean(1)
    return alpha * (f * p).sum(-1).mean()


def init_decoder(model, cfg, make_layers):
    """The decoder both families share around their layers: token
    embedding, the layers (`make_layers()`), a final RMS norm and an untied
    LM head, linear and embedding weights drawn from N(0, 0.02)."""
    model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
    model.layers = nn.ModuleList(make_layers())
    model.norm = RMSNorm(cfg.hidden_size)
    model.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)


def decoder_forward(model, input_ids, labels):
    """(logits, next-token loss plus every MoE layer's balancing loss)."""
    x = model.embed_tokens(input_ids)
    aux_total = torch.zeros(())
    for layer in model.layers:
        x, aux = layer(x)
        if aux is not None:
            aux_total = aux_total + aux
    logits = model.lm_head(model.norm(x))
    lm = F.cross_entropy(logits[:, :-1].reshape(-1, model.cfg.vocab_size),
                         labels[:, 1:].reshape(-1))
    return logits, lm + aux_total


def capacity(factor, k, experts):
    """Slots per expert and routing group (one sequence)."""
    return math.ceil(factor * k * SEQ / experts)


# ---------------------------------------------------------------- DeepSeek


class DeepSeekConfig:
    vocab_size = 96
    hidden_size = 64
    num_layers = 3
    num_heads = 4
    kv_lora_rank = 16
    qk_nope_head_dim = 8
    qk_rope_head_dim = 4
    v_head_dim = 8
    intermediate_size = 96  # the dense first layer
    moe_intermediate_size = 24
    n_routed_experts = 4
    n_shared_experts = 1
    num_experts_per_tok = 2
    routed_scaling_factor = 1.5
    capacity_factor = 1.25
    aux_loss_alpha = 0.01
    first_k_dense_replace = 1


class MultiheadLatentAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.num_heads
        self.nope = cfg.qk_nope_head_dim
        self.rope = cfg.qk_rope_head_dim
        self.vdim = cfg.v_head_dim
        self.rank = cfg.kv_lora_rank
        q_dim = self.nope + self.rope
        self.q_proj = nn.Linear(cfg.hidden_size, self.h * q_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(cfg.hidden_size,
                                            self.rank + self.rope,
                                            bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank)
        self.kv_b_proj = nn.Linear(self.rank, self.h * (self.nope + self.vdim),
                                   bias=False)
        self.o_proj = nn.Linear(self.h * self.vdim, cfg.hidden_size,
                                bias=False)
        self.scale = q_dim ** -0.5
        cos, sin = rotary_tables(self.rope, SEQ)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", causal_mask(SEQ), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.nope + self.rope)
        q = q.transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.nope, self.rope], dim=-1)
        latent = self.kv_a_proj_with_mqa(x)
        compressed, k_pe = torch.split(latent, [self.rank, self.rope],
                                       dim=-1)
        k_pe = k_pe.view(b, s, 1, self.rope).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(compressed))
        kv = kv.view(b, s, self.h, self.nope + self.vdim).transpose(1, 2)
        k_nope, v = torch.split(kv, [self.nope, self.vdim], dim=-1)
        cos, sin = self.cos[:s], self.sin[:s]
        q_pe = apply_rotary(q_pe, cos, sin)
        k_pe = apply_rotary(k_pe, cos, sin)
        query = torch.cat([q_nope, q_pe], dim=-1)
        key = torch.cat([k_nope, k_pe.expand(b, self.h, s, self.rope)],
                        dim=-1)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scale
        scores = scores + self.mask[:s, :s]
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(
            b, s, self.h * self.vdim)
        return self.o_proj(out)


class DeepSeekMoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.k = cfg.num_experts_per_tok
        self.num = cfg.n_routed_experts
        self.scaling = cfg.routed_scaling_factor
        self.alpha = cfg.aux_loss_alpha
        self.capacity = capacity(cfg.capacity_factor, self.k, self.num)
        self.gate = nn.Linear(cfg.hidden_size, self.num, bias=False)
        self.experts = Experts(self.num, cfg.hidden_size,
                               cfg.moe_intermediate_size)
        self.shared_experts = SwiGLU(
            cfg.hidden_size,
            cfg.moe_intermediate_size * cfg.n_shared_experts)

    def forward(self, x):
        probs = F.softmax(self.gate(x), dim=-1)
        top_v, dispatch, chosen = route(probs, self.k, self.capacity)
        routed = run_experts(self.experts, x, dispatch, top_v * self.scaling)
        aux = balance_loss(probs, chosen, self.alpha)
        return routed + self.shared_experts(x), aux


class DeepSeekLayer(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size)
        self.self_attn = MultiheadLatentAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size)
        self.dense = index < cfg.first_k_dense_replace
        self.mlp = (SwiGLU(cfg.hidden_size, cfg.intermediate_size)
                    if self.dense else DeepSeekMoE(cfg))

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        if self.dense:
            return x + self.mlp(h), None
        out, aux = self.mlp(h)
        return x + out, aux


class DeepSeekForCausalLM(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg = cfg or DeepSeekConfig()
        init_decoder(self, cfg, lambda: [DeepSeekLayer(cfg, i)
                                         for i in range(cfg.num_layers)])

    def forward(self, input_ids, labels):
        return decoder_forward(self, input_ids, labels)


# ---------------------------------------------------------------- Mixtral


class MixtralConfig:
    vocab_size = 96
    hidden_size = 64
    num_layers = 2
    num_heads = 4
    num_kv_heads = 2
    intermediate_size = 48
    num_local_experts = 4
    num_experts_per_tok = 2
    capacity_factor = 1.5
    router_aux_loss_coef = 0.02


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.num_heads
        self.kv = cfg.num_kv_heads
        self.d = cfg.hidden_size // cfg.num_heads
        self.q_proj = nn.Linear(cfg.hidden_size, self.h * self.d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv * self.d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, cfg.hidden_size, bias=False)
        cos, sin = rotary_tables(self.d, SEQ)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("mask", causal_mask(SEQ), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        q = apply_rotary(q, self.cos[:s], self.sin[:s])
        k = apply_rotary(k, self.cos[:s], self.sin[:s])
        rep = self.h // self.kv
        k = k[:, :, None].expand(b, self.kv, rep, s, self.d).reshape(
            b, self.h, s, self.d)
        v = v[:, :, None].expand(b, self.kv, rep, s, self.d).reshape(
            b, self.h, s, self.d)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        probs = F.softmax(scores + self.mask[:s, :s], dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


class SparseMoeBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.k = cfg.num_experts_per_tok
        self.num = cfg.num_local_experts
        self.coef = cfg.router_aux_loss_coef
        self.capacity = capacity(cfg.capacity_factor, self.k, self.num)
        self.gate = nn.Linear(cfg.hidden_size, self.num, bias=False)
        self.experts = Experts(self.num, cfg.hidden_size,
                               cfg.intermediate_size)

    def forward(self, x):
        logits = self.gate(x)
        top_logits, dispatch, chosen = route(logits, self.k, self.capacity)
        weights = F.softmax(top_logits, dim=-1)
        out = run_experts(self.experts, x, dispatch, weights)
        aux = balance_loss(F.softmax(logits, dim=-1), chosen, self.coef)
        return out, aux


class MixtralLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size)
        self.self_attn = GroupedQueryAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size)
        self.block_sparse_moe = SparseMoeBlock(cfg)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        out, aux = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + out, aux


class MixtralForCausalLM(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg = cfg or MixtralConfig()
        init_decoder(self, cfg, lambda: [MixtralLayer(cfg)
                                         for _ in range(cfg.num_layers)])

    def forward(self, input_ids, labels):
        return decoder_forward(self, input_ids, labels)


MODELS = {
    "deepseek": DeepSeekForCausalLM,
    "mixtral": MixtralForCausalLM,
}


def dropped_choices(model, inputs):
    """(dropped, total) expert choices of one forward: a choice is kept
    when its dispatch row has a slot."""
    counts = [0, 0]
    plain = route

    def counting(scores, k, capacity):
        top_v, dispatch, chosen = plain(scores, k, capacity)
        counts[0] += int(chosen.sum() - dispatch.sum())
        counts[1] += int(chosen.sum())
        return top_v, dispatch, chosen

    globals()["route"] = counting
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        globals()["route"] = plain
    return counts


def main():
    kind, model_path, batches_path = sys.argv[1], sys.argv[2], sys.argv[3]
    steps = int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    torch.manual_seed(0)
    model = MODELS[kind]().train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.cfg.vocab_size, (batch, SEQ), generator=gen)
    inputs = {"input_ids": ids, "labels": ids.clone()}
    merak_trace.save(model, tuple(t[:4] for t in inputs.values()),
                     model_path)
    merak_safetensors.save({name: t.unsqueeze(0).repeat(
        steps, *([1] * t.dim())) for name, t in inputs.items()},
        batches_path)
    params = sum(p.numel() for p in model.parameters())
    dropped, total = dropped_choices(model, tuple(inputs.values()))
    print("%s: %d parameters, %d of %d expert choices dropped at capacity"
          % (kind, params, dropped, total))


if __name__ == "__main__":
    main()
