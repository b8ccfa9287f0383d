"""Trainable PyTorch versions of the two architectures moeserve loads, with the parameter names
of their Hugging Face checkpoints (state_dict() keys are the tensor names written to disk).

The math follows tests/reference/{qwen3_moe,deepseek_v3}_ref.py (the oracle the C++ model is
checked against): RMSNorm, SwiGLU experts, rotate-half RoPE (Qwen3) and the interleaved RoPE of
MLA's rope part (DeepSeek), softmax top-k routing (Qwen3) and sigmoid grouped top-k with the
score-correction bias (DeepSeek-V3, noaux_tc). Only the training-time additions are new here:
the balance losses and the DeepSeek MTP module.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def linear(i, o):
    return nn.Linear(i, o, bias=False)


def rope_tables(dim, theta, n):
    """cos, sin [n, dim] in the cat(freqs, freqs) layout."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def rope_neox(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def rope_interleave(x, cos, sin):
    """Pairs (x[2i], x[2i+1]) rotated by frequency i; the result in de-interleaved order."""
    return rope_neox(torch.cat([x[..., 0::2], x[..., 1::2]], -1), cos, sin)


def causal_attention(q, k, v, scale):
    """q, k [B, H, T, dq], v [B, H, T, dv] -> [B, T, H * dv]."""
    t = q.shape[2]
    s = (q @ k.transpose(-1, -2)) * scale
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    out = s.softmax(-1) @ v
    b, h, _, dv = out.shape
    return out.transpose(1, 2).reshape(b, t, h * dv)


class SwiGLU(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(hidden, inter), linear(hidden, inter), linear(inter, hidden)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def run_experts(experts, x, idx, w):
    """x [N, hidden], idx / w [N, k] -> sum_j w[:, j] * experts[idx[:, j]](x)."""
    out = torch.zeros_like(x)
    for e in torch.unique(idx).tolist():
        rows, slots = torch.nonzero(idx == e, as_tuple=True)
        out.index_add_(0, rows, experts[e](x[rows]) * w[rows, slots].unsqueeze(-1))
    return out


class Qwen3Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        h = c["hidden_size"]
        self.q_proj, self.k_proj = linear(h, self.heads * self.d), linear(h, self.kv_heads * self.d)
        self.v_proj, self.o_proj = linear(h, self.kv_heads * self.d), linear(self.heads * self.d, h)
        self.q_norm, self.k_norm = RMSNorm(self.d, c["rms_norm_eps"]), RMSNorm(self.d, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.d).transpose(1, 2)
        q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
        g = self.heads // self.kv_heads
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        return self.o_proj(causal_attention(q, k, v, self.d ** -0.5))


class Qwen3SparseMoe(nn.Module):
    """Softmax over all experts, top-k, renormalized (norm_topk_prob). Balance: the Switch
    auxiliary loss E * sum_e f_e * P_e that HF's Qwen3-MoE adds with router_aux_loss_coef."""

    def __init__(self, c):
        super().__init__()
        self.k, self.num_experts = c["num_experts_per_tok"], c["num_experts"]
        self.gate = linear(c["hidden_size"], self.num_experts)
        self.experts = nn.ModuleList(SwiGLU(c["hidden_size"], c["moe_intermediate_size"])
                                     for _ in range(self.num_experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.gate(x).softmax(-1)
        w, idx = probs.topk(self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        frac = torch.zeros(self.num_experts).index_add_(0, idx.reshape(-1), torch.ones(idx.numel())) / idx.numel()
        aux = self.num_experts * (frac * probs.mean(0)).sum()
        return run_experts(self.experts, x, idx, w).view(shape), aux, idx


class MlaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.heads = c["hidden_size"], c["num_attention_heads"]
        self.nope, self.rope, self.dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.rank = c["kv_lora_rank"]
        self.q_a_proj = linear(h, c["q_lora_rank"])
        self.q_a_layernorm = RMSNorm(c["q_lora_rank"], 1e-6)
        self.q_b_proj = linear(c["q_lora_rank"], self.heads * (self.nope + self.rope))
        self.kv_a_proj_with_mqa = linear(h, self.rank + self.rope)
        self.kv_a_layernorm = RMSNorm(self.rank, 1e-6)
        self.kv_b_proj = linear(self.rank, self.heads * (self.nope + self.dv))
        self.o_proj = linear(self.heads * self.dv, h)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, t, self.heads, -1).transpose(1, 2)
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
        kv_a = self.kv_a_proj_with_mqa(x)
        latent, k_pe = kv_a[..., :self.rank], kv_a[..., self.rank:]
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, t, self.heads, -1).transpose(1, 2)
        k_nope, v = kv[..., :self.nope], kv[..., self.nope:]
        q_pe = rope_interleave(q_pe, cos, sin)
        k_pe = rope_interleave(k_pe.unsqueeze(1), cos, sin).expand(b, self.heads, t, self.rope)
        qf, kf = torch.cat([q_nope, q_pe], -1), torch.cat([k_nope, k_pe], -1)
        return self.o_proj(causal_attention(qf, kf, v, (self.nope + self.rope) ** -0.5))


class DeepseekGate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c["n_routed_experts"], c["hidden_size"]))
        # Not trained by gradients: moved toward balance after each step (update_bias).
        self.register_buffer("e_score_correction_bias", torch.zeros(c["n_routed_experts"]))


class DeepseekMoe(nn.Module):
    """Sigmoid scores; choice = score + bias; n_group groups ranked by the sum of their top-2
    choices, topk_group kept; top-k of those; weights = the chosen unbiased scores, normalized,
    times routed_scaling_factor; plus the shared experts. Balance as DeepSeek-V3 trains it: the
    bias moves by bias_update_speed toward balance after each step (auxiliary-loss-free), plus
    a small sequence-wise balance loss."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.num_experts, self.k = c["n_routed_experts"], c["num_experts_per_tok"]
        self.gate = DeepseekGate(c)
        self.experts = nn.ModuleList(SwiGLU(c["hidden_size"], c["moe_intermediate_size"])
                                     for _ in range(self.num_experts))
        self.shared_experts = SwiGLU(c["hidden_size"], c["moe_intermediate_size"] * c["n_shared_experts"])
        self.load = torch.zeros(self.num_experts)  # tokens per expert since the last bias update

    def route(self, x):
        c = self.c
        scores = torch.sigmoid(x @ self.gate.weight.t())
        choice = scores.detach() + self.gate.e_score_correction_bias
        n, groups = x.shape[0], c["n_group"]
        group_score = choice.view(n, groups, -1).topk(2, -1).values.sum(-1)
        keep = torch.zeros(n, groups).scatter_(1, group_score.topk(c["topk_group"], -1).indices, 1.0)
        mask = keep.repeat_interleave(self.num_experts // groups, 1).bool()
        idx = choice.masked_fill(~mask, 0.0).topk(self.k, -1).indices
        w = scores.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * c["routed_scaling_factor"]
        return scores, idx, w

    def forward(self, x):
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        scores, idx, w = self.route(flat)
        # sequence-wise balance loss: E/(k T) * counts, times the mean normalized score, per sequence
        counts = torch.zeros(b, self.num_experts).scatter_add_(
            1, idx.view(b, -1), torch.ones(b, t * self.k)) * self.num_experts / (self.k * t)
        p = (scores / scores.sum(-1, keepdim=True)).view(b, t, -1).mean(1)
        aux = (counts * p).sum(-1).mean()
        if self.training:
            self.load += torch.bincount(idx.reshape(-1), minlength=self.num_experts).float()
        out = run_experts(self.experts, flat, idx, w) + self.shared_experts(flat)
        return out.view(b, t, h), aux, idx

    @torch.no_grad()
    def update_bias(self, speed):
        err = self.load.mean() - self.load
        self.gate.e_score_correction_bias += speed * torch.sign(err)
        self.load.zero_()


class DecoderLayer(nn.Module):
    def __init__(self, c, attention, mlp):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = attention
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = mlp

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        if isinstance(self.mlp, SwiGLU):
            return x + self.mlp(h), None, None
        out, aux, idx = self.mlp(h)
        return x + out, aux, idx


class MtpLayer(DecoderLayer):
    """DeepSeek-V3's multi-token-prediction module (depth 1) under model.layers.{N}: at position
    i it reads h_i (the main model's final normed hidden state) and the embedding of token i+1:
    eh_proj(cat(enorm(embed), hnorm(h))), one decoder layer, shared_head.norm, and predicts token
    i+2 with shared_head.head. Its embedding and head are the main model's (written as copies)."""

    def __init__(self, c):
        super().__init__(c, MlaAttention(c), DeepseekMoe(c))
        h = c["hidden_size"]
        self.enorm, self.hnorm = RMSNorm(h, c["rms_norm_eps"]), RMSNorm(h, c["rms_norm_eps"])
        self.eh_proj = linear(2 * h, h)
        self.shared_head = nn.Module()
        self.shared_head.norm = RMSNorm(h, c["rms_norm_eps"])

    def forward_mtp(self, hidden, next_embed, cos, sin):
        x = self.eh_proj(torch.cat([self.enorm(next_embed), self.hnorm(hidden)], -1))
        x, aux, idx = self.forward(x, cos, sin)
        return self.shared_head.norm(x), aux, idx


class CausalLM(nn.Module):
    """model.embed_tokens, model.layers.*, model.norm, lm_head (+ model.layers.{N} MTP)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        deepseek = c["model_type"] == "deepseek_v3"
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        layers = []
        for i in range(c["num_hidden_layers"]):
            if deepseek:
                dense = i < c["first_k_dense_replace"]
                mlp = SwiGLU(c["hidden_size"], c["intermediate_size"]) if dense else DeepseekMoe(c)
                layers.append(DecoderLayer(c, MlaAttention(c), mlp))
            else:
                dense = i in c["mlp_only_layers"]
                mlp = SwiGLU(c["hidden_size"], c["intermediate_size"]) if dense else Qwen3SparseMoe(c)
                layers.append(DecoderLayer(c, Qwen3Attention(c), mlp))
        if deepseek and c.get("num_nextn_predict_layers", 0):
            layers.append(MtpLayer(c))
        self.model.layers = nn.ModuleList(layers)
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = linear(c["hidden_size"], c["vocab_size"])
        rope_dim = c["qk_rope_head_dim"] if deepseek else c["head_dim"]
        self.rope = (rope_dim, float(c["rope_theta"]))
        self.reset_parameters()

    def reset_parameters(self):
        g = torch.Generator().manual_seed(1234)
        n = self.c["num_hidden_layers"]
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = 0.02 / math.sqrt(2 * n) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def moe_layers(self):
        return [m for m in self.modules() if isinstance(m, (Qwen3SparseMoe, DeepseekMoe))]

    def forward(self, ids):
        """ids [B, T] -> (logits [B, T, V], MTP logits [B, T-1, V] or None, aux loss, routes)."""
        cos, sin = rope_tables(self.rope[0], self.rope[1], ids.shape[1])
        x = self.model.embed_tokens(ids)
        aux, routes = 0.0, []
        n = self.c["num_hidden_layers"]
        for layer in self.model.layers[:n]:
            x, a, idx = layer(x, cos, sin)
            if a is not None:
                aux, routes = aux + a, routes + [idx]
        h = self.model.norm(x)
        logits = self.lm_head(h)
        mtp_logits = None
        if len(self.model.layers) > n:
            t = ids.shape[1] - 1
            y, a, idx = self.model.layers[n].forward_mtp(h[:, :t], self.model.embed_tokens(ids[:, 1:]),
                                                         cos[:t], sin[:t])
            mtp_logits = self.lm_head(y)
            aux, routes = aux + a, routes + [idx]
        return logits, mtp_logits, aux, routes
