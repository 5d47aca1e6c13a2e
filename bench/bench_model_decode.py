"""Per-token greedy decode latency of a whole Qwen3-0.6B-shaped model (28 layers, hidden 1024,
intermediate 3072, 16 q / 8 kv heads of 128, vocab 151936, tied embeddings, bf16, random weights) at
context 1024, batch 1 and 8, in one megakernel, next to the same model in torch (eager, and replayed
from a CUDA graph) and the weight-read floor, in one run.

- mpk: one offline-mode launch decodes N tokens per request after 1023 tokens of history (the KV
  cache's history is whatever the cache holds: timing only; tests/gpu/test_model_gpu.py checks
  the tokens). Per token = T(N = 64) / 64: the launch's fixed cost (start, first and last
  prepare_next_batch, about 20-30 us) adds under 0.5 us to each token. (One kernel per batch: its
  graph of ~28k tasks takes ~20 s of Python to build and lower.)
- torch: one decode step (embedding, 28 layers with SDPA over a contiguous 1024-token cache, final
  norm, lm head, argmax) with static shapes, eager and replayed from a CUDA graph.
- floor: the weight bytes (and, second, weights + the KV cache read) / the copy bandwidth measured
  in this run. Goal: >= 1.5x faster than the CUDA graph and >= 75% of the weight floor at batch 1.

- --profile: where one decode step's time goes, at batch 1 (profiler, perfetto installed): per role of
  layer (qkv, attention, gate_up, ...), summed over the 28 decoder layers, the span (first task
  begin to last task end), the wait before it (the previous layer's last end to its first begin)
  and the tasks' mean duration, in a middle iteration of a short launch; and, for the task types
  whose bodies mark phases (Runtime::mark: the paged attention), each phase's median duration.
- --grids qkv=128,gate_up=128,...: override fields of the grid plan (models/grids.py) for both.

    python bench/bench_model_decode.py [--arch sm90|sm80] [--profile] [--grids ...]   # writes $OUT/bench_model_decode.json
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from mpk_runtime.models import PRESETS, Qwen3Config, Qwen3Grids, build_qwen3, expected_weights  # noqa: E402
from mpk_runtime.models import grids as grid_plan  # noqa: E402
from mpk_runtime.profile.decode import decode  # noqa: E402
from mpk_runtime.profile.trace import phase_name  # noqa: E402

import layer_bench  # noqa: E402
import timing  # noqa: E402

CONFIG = Qwen3Config(**PRESETS["qwen3-0.6b"])
CONTEXT, PAGE, NEW_TOKENS = 1024, 64, 64
BF = torch.bfloat16


def weights() -> dict[str, torch.Tensor]:
    """Random weights on the GPU (Hugging Face names), scaled as random_state_dict scales them."""
    g = torch.Generator(device="cuda").manual_seed(0)
    sd = {}
    for name, shape in expected_weights(CONFIG).items():
        if len(shape) == 1:
            sd[name] = (1 + 0.1 * torch.randn(shape, generator=g, device="cuda")).to(BF)
        else:
            scale = (
                0.5 / (shape[-1] * CONFIG.num_hidden_layers) ** 0.5 if "o_proj" in name or "down" in name else shape[-1] ** -0.5
            )
            sd[name] = (torch.randn(shape, generator=g, device="cuda") * scale).to(BF)
    return sd


def decode_kernel(sd: dict, batch: int, new_tokens: int, arch: str, overrides: dict, **extra):
    """A compiled kernel that decodes ``new_tokens`` tokens for each of ``batch`` requests in one launch."""
    seq = CONTEXT + new_tokens
    params = dict(
        test_mode=False,
        target_cc=int(arch[2:]),
        max_num_batched_tokens=batch,
        max_num_batched_requests=batch,
        max_num_pages=batch * -(-seq // PAGE),
        page_size=PAGE,
        max_seq_length=seq,
        meta_tensors={
            "tokens": torch.randint(0, CONFIG.vocab_size, (batch, seq), device="cuda"),
            "prompt_lengths": torch.full((batch,), CONTEXT, dtype=torch.int32, device="cuda"),
            "step": torch.full((batch,), CONTEXT - 1, dtype=torch.int32, device="cuda"),  # all but one token is history
        },
        **extra,
    )
    pk = layer_bench.kernel(**params)
    g = dataclasses.replace(grid_plan.plan(CONFIG, pk.params.num_workers, batch, batch, pk.block_dim[0]), **overrides)
    build_qwen3(pk, CONFIG, sd, grids=g)
    pk.compile()
    return pk, g


def mpk_launch_us(sd: dict, batch: int, new_tokens: int, arch: str, overrides: dict) -> tuple[float, Qwen3Grids]:
    """The time of one launch that decodes ``new_tokens`` tokens for each of ``batch`` requests."""
    pk, g = decode_kernel(sd, batch, new_tokens, arch, overrides)
    us = timing.time_us(pk, reps=3, warmup=1, rounds=3, device_bound=True)
    pk.synchronize()
    pk.finalize()
    return us, g


def role(layer) -> str:
    """What a layer is in the model: its output tensor's name without the decoder layer's number."""
    out = next((a.tensor for a in layer.args if a.name == "output"), None) or next(
        (a.tensor for a in layer.args if a.direction == "OUT"), layer.name
    )
    return out.split(".", 2)[-1] if out.startswith("layers.") else out


def profile_step(sd: dict, batch: int, arch: str, overrides: dict) -> dict:
    """Per role of layer, summed over the model, in one middle iteration: span, wait before, tasks."""
    prof = torch.zeros(1 << 23, dtype=torch.uint64, device="cuda")
    trace = str(Path(tempfile.mkdtemp()) / "model")
    pk, _ = decode_kernel(sd, batch, 4, arch, overrides, profiler_tensor=prof, trace_name=trace)
    pk()
    pk.synchronize()
    p, graph = pk.params, pk.compiled_graph
    profile = decode(prof, p.num_workers, p.num_local_schedulers)
    pk.finalize()
    layer_of = {t.id: t.layer for t in graph.tasks}
    iterations = sorted({s.iteration for s in profile.tasks})
    it = iterations[len(iterations) // 2]
    spans: dict[int, list[int]] = {}
    busy: dict[int, list[int]] = defaultdict(list)
    for s in profile.tasks:
        if s.iteration != it:
            continue
        lo_hi = spans.setdefault(layer_of[s.task], [1 << 62, 0])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], s.begin_ns), max(lo_hi[1], s.end_ns)
        busy[layer_of[s.task]].append(s.duration_ns)
    layers = {layer.id: layer for layer in graph.layers}
    by_role: dict[str, dict] = {}
    prev_end = None
    for lid in sorted(spans, key=lambda i: spans[i][0]):
        lo, hi = spans[lid]
        r = by_role.setdefault(role(layers[lid]), {"layers": 0, "span_us": 0.0, "wait_us": 0.0, "tasks": 0, "task_us": []})
        r["layers"] += 1
        r["span_us"] += (hi - lo) / 1e3
        r["wait_us"] += 0.0 if prev_end is None else (lo - prev_end) / 1e3
        r["tasks"] += len(busy[lid])
        r["task_us"] += [d / 1e3 for d in busy[lid]]
        prev_end = hi
    first = min(lo for lo, _ in spans.values())
    last = max(hi for _, hi in spans.values())
    for r in by_role.values():
        durations = sorted(r.pop("task_us"))
        r["task_mean_us"] = sum(durations) / len(durations)
        r["task_max_us"] = durations[-1]
    prepare = [s.duration_ns / 1e3 for s in profile.prepare if s.iteration == it]
    phases: dict[str, dict[str, list[float]]] = {}  # task type -> phase -> durations (Runtime::mark)
    for s in profile.tasks:
        task_type = layers[layer_of[s.task]].task
        for no, begin, end in s.phases() if s.iteration == it else ():
            phases.setdefault(task_type, {}).setdefault(phase_name(task_type, no, s.marks), []).append((end - begin) / 1e3)
    return {
        "iteration": it,
        "iteration_us": (last - first) / 1e3,
        "prepare_us": prepare,
        "problems": profile.problems(),
        "roles": by_role,
        "phase_median_us": {t: {n: statistics.median(d) for n, d in ps.items()} for t, ps in phases.items()},
    }


def print_profile(prof: dict) -> None:
    print(f"one decode step (iteration {prof['iteration']}): {prof['iteration_us']:.1f} us of tasks")
    print(f"prepare_next_batch: {prof['prepare_us']} us")
    if prof["problems"]:
        print("profile:", prof["problems"])
    print("| role | layers | span µs (sum) | wait before µs (sum) | tasks per layer | task mean µs | task max µs |")
    print("|---|---|---|---|---|---|---|")
    for name, r in prof["roles"].items():
        print(
            f"| {name} | {r['layers']} | {r['span_us']:.1f} | {r['wait_us']:.1f} | {r['tasks'] / r['layers']:.0f} | "
            f"{r['task_mean_us']:.2f} | {r['task_max_us']:.2f} |"
        )
    for task_type, medians in prof["phase_median_us"].items():
        print(f"{task_type} phases, median µs over the step's tasks: " + "; ".join(f"{n} {v:.2f}" for n, v in medians.items()))


def parse_grids(text: str | None) -> dict:
    if not text:
        return {}
    names = {f.name for f in dataclasses.fields(Qwen3Grids)}
    out = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in names or not value.isdigit():
            raise SystemExit(f"--grids: {item!r} is not <field>=<int> with a field of {sorted(names)}")
        out[key] = int(value)
    return out


class TorchDecode:
    """One greedy decode step of the same model in torch, static shapes (a CUDA-graph-able step):
    ``batch`` new tokens at position CONTEXT - 1 over a contiguous cache of CONTEXT keys."""

    def __init__(self, sd: dict, batch: int):
        c = CONFIG
        self.sd, self.b = sd, batch
        self.qkv = [
            torch.cat([sd[f"model.layers.{i}.self_attn.{w}_proj.weight"] for w in "qkv"]) for i in range(c.num_hidden_layers)
        ]
        self.gate_up = [
            torch.cat([sd[f"model.layers.{i}.mlp.{w}_proj.weight"] for w in ("gate", "up")]) for i in range(c.num_hidden_layers)
        ]
        shape = (batch, c.num_key_value_heads, CONTEXT, c.head_dim)
        self.k = [torch.randn(shape, dtype=BF, device="cuda") for _ in range(c.num_hidden_layers)]
        self.v = [torch.randn(shape, dtype=BF, device="cuda") for _ in range(c.num_hidden_layers)]
        inv = c.rope_theta ** (-torch.arange(0, c.head_dim, 2, device="cuda", dtype=torch.float64) / c.head_dim)
        ang = torch.cat([(CONTEXT - 1) * inv] * 2)
        self.cos, self.sin = ang.cos().to(BF), ang.sin().to(BF)
        self.tokens = torch.zeros(batch, dtype=torch.int64, device="cuda")

    def norm(self, x, w):
        return F.rms_norm(x, (x.shape[-1],), w, CONFIG.rms_norm_eps)

    def rope(self, x):
        d = x.shape[-1] // 2
        return x * self.cos + torch.cat([-x[..., d:], x[..., :d]], dim=-1) * self.sin

    def step(self) -> torch.Tensor:
        c, sd, b = CONFIG, self.sd, self.b
        h, kv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = sd["model.embed_tokens.weight"][self.tokens]
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            qkv = F.linear(self.norm(x, sd[p + "input_layernorm.weight"]), self.qkv[i])
            q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
            q = self.rope(self.norm(q.view(b, h, 1, d), sd[p + "self_attn.q_norm.weight"]))
            k = self.rope(self.norm(k.view(b, kv, 1, d), sd[p + "self_attn.k_norm.weight"]))
            self.k[i][:, :, CONTEXT - 1 :] = k
            self.v[i][:, :, CONTEXT - 1 :] = v.view(b, kv, 1, d)
            a = F.scaled_dot_product_attention(q, self.k[i], self.v[i], enable_gqa=True).reshape(b, h * d)
            x = x + F.linear(a, sd[p + "self_attn.o_proj.weight"])
            gu = F.linear(self.norm(x, sd[p + "post_attention_layernorm.weight"]), self.gate_up[i])
            g, u = gu.chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, sd[p + "mlp.down_proj.weight"])
        logits = F.linear(self.norm(x, sd["model.norm.weight"]), sd["model.embed_tokens.weight"])
        self.tokens.copy_(logits.argmax(dim=-1))
        return self.tokens


def torch_us(sd: dict, batch: int) -> tuple[float, float]:
    model = TorchDecode(sd, batch)
    eager = timing.time_us(model.step, reps=20, warmup=3)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.step()
    return eager, timing.time_us(graph.replay, reps=50, warmup=5, device_bound=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm90", choices=["sm80", "sm90"])
    parser.add_argument("--profile", action="store_true", help="Also profile one decode step at batch 1")
    parser.add_argument("--grids", help="Override grid plan fields, e.g. qkv=128,gate_up=128")
    parser.add_argument("--batches", default="1,8", help="Batch sizes to time (default 1,8)")
    args = parser.parse_args()
    arch, overrides = args.arch, parse_grids(args.grids)
    facts = timing.device_facts()
    copy = layer_bench.copy_bandwidth()
    sd = weights()
    weight_bytes = sum(t.numel() * t.element_size() for t in sd.values())
    rows = []
    profiled = None
    if args.profile:
        profiled = profile_step(sd, 1, arch, overrides)
        print_profile(profiled)
    for batch in [int(b) for b in args.batches.split(",") if b]:
        launch, g = mpk_launch_us(sd, batch, NEW_TOKENS, arch, overrides)
        mpk_us = launch / NEW_TOKENS
        eager_us, graph_us = torch_us(sd, batch)
        kv_bytes = 2 * CONFIG.num_hidden_layers * batch * CONFIG.num_key_value_heads * CONTEXT * CONFIG.head_dim * 2
        floor_us = weight_bytes / (copy * 1e12) * 1e6
        rows.append(
            {
                "batch": batch,
                "grids": dataclasses.asdict(g),
                "mpk_us": mpk_us,
                "mpk_launch_us": launch,
                "new_tokens": NEW_TOKENS,
                "torch_eager_us": eager_us,
                "torch_cuda_graph_us": graph_us,
                "weight_floor_us": floor_us,
                "weight_kv_floor_us": (weight_bytes + kv_bytes) / (copy * 1e12) * 1e6,
                "speedup_vs_graph": graph_us / mpk_us,
                "pct_of_weight_floor": 100 * floor_us / mpk_us,
            }
        )
        torch.cuda.empty_cache()
    timing.save(
        "bench_model_decode",
        {**facts, "arch": arch, "copy_TBps": copy, "weight_bytes": weight_bytes, "rows": rows, "profile": profiled},
    )
    print(
        f"{facts['device']}, {facts['date']}, {arch} build; copy bandwidth {copy:.2f} TB/s; weights {weight_bytes / 1e9:.3f} GB"
    )
    head = ["batch", "mpk µs/token", "torch eager", "torch CUDA graph", "weight floor", "weight+KV floor", "graph / mpk"]
    print("| " + " | ".join([*head, "% of weight floor"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ok = r["speedup_vs_graph"] >= 1.5 and r["pct_of_weight_floor"] >= 75
        verdict = timing.judged("" if ok else "BELOW TARGET") if r["batch"] == 1 else ""  # the goal is batch 1's
        mark = f" {verdict}" if verdict else ""
        print(
            f"| {r['batch']} | {r['mpk_us']:.1f} | {r['torch_eager_us']:.1f} | {r['torch_cuda_graph_us']:.1f} | "
            f"{r['weight_floor_us']:.1f} | {r['weight_kv_floor_us']:.1f} | {r['speedup_vs_graph']:.2f}x | "
            f"{r['pct_of_weight_floor']:.0f}%{mark} |"
        )


if __name__ == "__main__":
    main()
