"""A Qwen3 decoder (dense or MoE) in plain PyTorch, written from the math, for checking the whole
model the runtime builds (mpk_runtime.models). No transformers needed.

Weights are a Hugging Face Qwen3-named state_dict; ``config`` is anything with the Qwen3 config's
attribute names (``mpk_runtime.models.Qwen3Config``, a HF config, a SimpleNamespace). Every op
computes in fp32 and stores its result in the weights' dtype, as a bf16 model holds its
activations (and as the runtime's layers do: a projection plus its residual is rounded once). With
float32 weights it is the exact math, which is how it is compared with transformers' Qwen3.

Per layer: x -> RMSNorm -> q, k, v projections -> per-head RMSNorm of q and k -> rotate-half RoPE
at each token's position (base rope_theta, tables in the weights' dtype) -> causal attention, q head
h reading kv head h // (H / H_kv), scaled by 1/sqrt(D) -> o projection + x -> RMSNorm -> MLP + that
residual. MLP: down(silu(gate(x)) * up(x)); MoE: softmax over the k largest router logits (ties to
the lower expert), each token's experts' silu(gate) * up -> down, summed with those weights (the
experts stacked as transformers 5 holds them: mlp.experts.gate_up_proj (E, 2 I, H), down_proj).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _cfg(config, name, default=None):
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 RMSNorm over the last dim, times weight (fp32 result)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """Rotate-half RoPE of fp32 x (n, heads, D) at ``positions`` (n,): x cos + [-x2, x1] sin, with the
    cos / sin tables rounded to ``dtype`` (as a model in that dtype holds them)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv.to(positions.device)[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(dtype).float()[:, None, :], angles.sin().to(dtype).float()[:, None, :]
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * cos + rotated * sin


class Qwen3Reference:
    """The model with one request's KV cache: ``forward(tokens)`` appends tokens at the next
    positions and returns their logits; ``generate(prompt, n)`` decodes greedily."""

    def __init__(self, state_dict: dict[str, torch.Tensor], config):
        self.sd, self.c = state_dict, config
        self.dtype = state_dict["model.embed_tokens.weight"].dtype
        device = state_dict["model.embed_tokens.weight"].device
        self.layers = int(_cfg(config, "num_hidden_layers"))
        self.heads, self.kv_heads = int(_cfg(config, "num_attention_heads")), int(_cfg(config, "num_key_value_heads"))
        self.d = int(_cfg(config, "head_dim"))
        self.eps, self.theta = float(_cfg(config, "rms_norm_eps", 1e-6)), float(_cfg(config, "rope_theta", 1e6))
        self.topk = int(_cfg(config, "num_experts_per_tok", 0) or 0)
        self.experts = int(_cfg(config, "num_experts", 0) or 0)
        empty = torch.empty(0, self.kv_heads, self.d, dtype=self.dtype, device=device)
        self.k_cache: list[torch.Tensor] = [empty] * self.layers
        self.v_cache: list[torch.Tensor] = list(self.k_cache)
        self.hidden: list[torch.Tensor] = []  # each layer's output of the last forward()

    def w(self, name: str) -> torch.Tensor:
        return self.sd[name]

    def lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x.float() @ self.w(name).float().T

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (n, vocab), in the weights' dtype, of n new tokens after the cached ones."""
        dt = self.dtype
        table = self.w("model.embed_tokens.weight")
        x = table[torch.as_tensor(tokens, dtype=torch.int64).to(table.device)]
        self.hidden = []
        for i in range(self.layers):
            x = self.layer(i, x)
            self.hidden.append(x)
        xf = rmsnorm(x, self.w("model.norm.weight"), self.eps).to(dt)
        head = self.sd.get("lm_head.weight", self.w("model.embed_tokens.weight"))
        return (xf.float() @ head.float().T).to(dt)

    def layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        dt, p, n, d = self.dtype, f"model.layers.{i}.", x.shape[0], self.d
        xn = rmsnorm(x, self.w(p + "input_layernorm.weight"), self.eps).to(dt)
        q = self.lin(xn, p + "self_attn.q_proj.weight").to(dt).float().view(n, self.heads, d)
        k = self.lin(xn, p + "self_attn.k_proj.weight").to(dt).float().view(n, self.kv_heads, d)
        v = self.lin(xn, p + "self_attn.v_proj.weight").to(dt).view(n, self.kv_heads, d)
        s = self.k_cache[i].shape[0]
        pos = torch.arange(s, s + n, device=x.device)
        q = rope(rmsnorm(q, self.w(p + "self_attn.q_norm.weight"), self.eps), pos, self.theta, dt).to(dt)
        k = rope(rmsnorm(k, self.w(p + "self_attn.k_norm.weight"), self.eps), pos, self.theta, dt).to(dt)
        self.k_cache[i] = torch.cat([self.k_cache[i], k])
        self.v_cache[i] = torch.cat([self.v_cache[i], v])
        group = self.heads // self.kv_heads
        keys = self.k_cache[i].float().repeat_interleave(group, dim=1)
        values = self.v_cache[i].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), keys) / d**0.5
        causal = torch.arange(s + n, device=x.device)[None, :] <= pos[:, None]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        attn = torch.einsum("hqk,khd->qhd", probs, values).reshape(n, self.heads * d).to(dt)
        h = (self.lin(attn, p + "self_attn.o_proj.weight") + x.float()).to(dt)
        hn = rmsnorm(h, self.w(p + "post_attention_layernorm.weight"), self.eps).to(dt)
        return self.moe(p, hn, h) if self.experts else self.mlp(p, hn, h)

    def mlp(self, p: str, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        dt = self.dtype
        gate = self.lin(x, p + "mlp.gate_proj.weight").to(dt).float()
        up = self.lin(x, p + "mlp.up_proj.weight").to(dt).float()
        act = (F.silu(gate) * up).to(dt)
        return (self.lin(act, p + "mlp.down_proj.weight") + residual.float()).to(dt)

    def moe(self, p: str, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        dt = self.dtype
        logits = self.lin(x, p + "mlp.gate.weight").to(dt).float()
        order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, : self.topk]
        weights = torch.softmax(logits.gather(1, order), dim=1)  # = softmax over all, top k, renormalized
        out = residual.float().clone()
        w13, w2 = self.w(p + "mlp.experts.gate_up_proj"), self.w(p + "mlp.experts.down_proj")
        inter = w2.shape[2]
        for t in range(x.shape[0]):
            for j, e in enumerate(order[t].tolist()):
                gate_up = x[t].float() @ w13[e].float().T  # the expert's gate rows, then its up rows
                act = (F.silu(gate_up[:inter]) * gate_up[inter:]).to(dt)
                out[t] += weights[t, j] * (act.float() @ w2[e].float().T).to(dt).float()
        return out.to(dt)

    def generate(self, prompt, max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
        """Greedy decoding: (the generated tokens, the logits (max_new_tokens, vocab) each was the
        argmax of; ties go to the lower token id)."""
        logits = self.forward(torch.as_tensor(list(prompt)))[-1:]
        out, steps = [], []
        for i in range(max_new_tokens):
            steps.append(logits[0])
            out.append(int(torch.argmax(logits[0].float())))
            if i + 1 < max_new_tokens:
                logits = self.forward(torch.tensor([out[-1]]))
        return out, torch.stack(steps)


def qwen3_generate(state_dict, config, prompt, max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding of one prompt: (generated tokens, logits of every step)."""
    return Qwen3Reference(state_dict, config).generate(prompt, max_new_tokens)


def qwen3_logits(state_dict, config, tokens) -> torch.Tensor:
    """Logits (n, vocab) of every position of a token sequence (one causal forward)."""
    return Qwen3Reference(state_dict, config).forward(torch.as_tensor(list(tokens)))


def argmax_margin(logits: torch.Tensor) -> float:
    """The top logit minus the runner-up (fp32): how far greedy decoding is from a tie."""
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])
