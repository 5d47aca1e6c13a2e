"""mpk_runtime.models without running a kernel: the config's and the state_dict's checks (each
error names the value and the fix), the grids, the graph build_qwen3 declares (compile-only for
sm90a and sm80), and the reference model against transformers' Qwen3 where transformers is installed."""

from __future__ import annotations

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.harness import find_reference
from mpk_runtime.models import PRESETS, Qwen3Config, Qwen3Generator, build_qwen3, expected_weights, random_state_dict
from mpk_runtime.models.generate import generation_params
from mpk_runtime.models.grids import plan, tasks_for

TINY = PRESETS["tiny"]
Qwen3Reference = find_reference("Qwen3Reference", layer="qwen3_model")


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(head_dim=96), r"head_dim=96 .* use one of \(64, 128\)"),
        (dict(num_key_value_heads=3), r"num_attention_heads=4 over num_key_value_heads=3"),
        (dict(hidden_size=0), r"hidden_size=0 must be a positive integer"),
        (dict(rms_norm_eps=0.0), r"rms_norm_eps=0.0 must be a positive number"),
        (dict(dtype=torch.float32), r"dtype=torch.float32 is not supported"),
        (dict(num_experts=4, num_experts_per_tok=5, moe_intermediate_size=8), r"num_experts_per_tok <= num_experts"),
        (dict(num_experts_per_tok=2), r"num_experts=0 \(a dense MLP\)"),
    ],
)
def test_config_errors_name_the_value_and_the_fix(change, match):
    with pytest.raises(mpk.ConfigError, match=match):
        Qwen3Config(**{**TINY, **change})


def test_config_from_a_hugging_face_dict():
    hf = {**TINY, "rope_parameters": {"rope_theta": 1e4}, "architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": True}
    c = Qwen3Config.from_hf(hf)
    assert c.rope_theta == 1e4 and c.tie_word_embeddings and c.hidden_size == 128


def test_state_dict_errors():
    c = Qwen3Config(**TINY)
    sd = random_state_dict(c)
    missing = {k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"}
    with pytest.raises(mpk.WeightError, match=r"no 'model.layers.1.mlp.up_proj.weight'"):
        build_state(c, missing)
    with pytest.raises(mpk.WeightError, match=r"tie_word_embeddings=True"):
        build_state(c, {k: v for k, v in sd.items() if k != "lm_head.weight"})
    with pytest.raises(mpk.WeightError, match=r"'model.layers.2.mlp.up_proj.weight'.*check the config"):
        build_state(c, {**sd, "model.layers.2.mlp.up_proj.weight": sd["model.layers.1.mlp.up_proj.weight"]})
    with pytest.raises(mpk.WeightError, match=r"did you mean 'model.norm.weight'"):
        build_state(c, {**sd, "model.norm.weights": sd["model.norm.weight"]})
    bad = {**sd, "model.layers.0.self_attn.k_proj.weight": torch.zeros(64, 128, dtype=torch.bfloat16)}
    with pytest.raises(mpk.ShapeError, match=r"k_proj.weight'\] has shape \(64, 128\); this config needs \(128, 128\)"):
        build_state(c, bad)
    bad = {**sd, "model.norm.weight": sd["model.norm.weight"].float()}
    with pytest.raises(mpk.DTypeError, match=r"'model.norm.weight'\] is torch.float32.*pass t.to\(torch.bfloat16\)"):
        build_state(c, bad)


def test_per_expert_checkpoint_names_are_stacked():
    c = Qwen3Config(**TINY, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    sd = random_state_dict(c)
    split = {k: v for k, v in sd.items() if ".experts." not in k}
    for i in range(c.num_hidden_layers):
        w13, w2 = sd[f"model.layers.{i}.mlp.experts.gate_up_proj"], sd[f"model.layers.{i}.mlp.experts.down_proj"]
        for e in range(4):
            p = f"model.layers.{i}.mlp.experts.{e}."
            split[p + "gate_proj.weight"], split[p + "up_proj.weight"] = w13[e, :32], w13[e, 32:]
            split[p + "down_proj.weight"] = w2[e]
    from mpk_runtime.models.state_dict import check_state_dict

    fused = check_state_dict(c, split)
    assert all(torch.equal(fused[k], sd[k]) for k in expected_weights(c))
    del split["model.layers.1.mlp.experts.3.down_proj.weight"]
    with pytest.raises(mpk.WeightError, match=r"experts.3.down_proj.weight'.*expert 3 of layer 1"):
        check_state_dict(c, split)


def build_state(c, sd):
    """build_qwen3 on a compile-only kernel (checks run before anything is attached)."""
    pk = mpk.PersistentKernel(**kernel_params(90))
    build_qwen3(pk, c, sd)


def kernel_params(cc: int, prompts=((1, 2, 3), (4, 5)), new=4, max_batch_tokens=None) -> dict:
    params = mpk.PersistentKernel.get_default_init_parameters()
    gen = generation_params(list(prompts), new, max_batch_tokens=max_batch_tokens)
    params.update(gen, compile_only=True, target_cc=cc, num_workers=8)
    return params


def test_generation_errors():
    c = Qwen3Config(**TINY)
    sd = random_state_dict(c)
    with pytest.raises(mpk.ConfigError, match="at least one prompt"):
        generation_params([], 4)
    with pytest.raises(mpk.ConfigError, match=r"max_new_tokens=0 must be a positive integer"):
        generation_params([[1]], 0)
    with pytest.raises(mpk.ConfigError, match=r"max_batch_tokens=1 is less than the 2 prompts"):
        generation_params([[1], [2]], 4, max_batch_tokens=1)
    with pytest.raises(mpk.ConfigError, match=r"prompt 1 holds token id 512, outside the vocabulary \[0, 512\)"):
        Qwen3Generator(c, sd, [[1], [512]], 4, compile_only=True, target_cc=90, num_workers=8)


def test_grids_divide_the_shapes():
    assert tasks_for(151936, 132) == 1187  # 128-row slices of Qwen3's vocabulary
    assert tasks_for(1024, 132) == 128  # the largest there is
    assert tasks_for(4096, 132) == 128  # one wave of 32 rows, not two of 16
    assert tasks_for(151936, 132, group=1) == 128  # argmax chunks of 1187
    c = Qwen3Config(**{**PRESETS["qwen3-0.6b"], "tie_word_embeddings": False})
    g = plan(c, 132, 1, 1)
    assert (g.qkv, g.o_proj, g.gate_up, g.down, g.lm_head, g.attention_splits) == (128, 128, 128, 128, 1187, 16)
    assert plan(c, 132, 8, 8).attention_splits == 2
    # 32 x 8 (request, kv head) streams on 132 workers: one task per two kv heads, no split
    assert (plan(c, 132, 32, 32).attention_splits, plan(c, 132, 32, 32).attention_kv_heads_per_task) == (1, 2)
    assert plan(c, 132, 16, 16).attention_kv_heads_per_task == 1  # 128 streams: one a worker
    assert plan(c, 132, 32, 32, worker_threads=128).attention_kv_heads_per_task == 1  # no halves of 2 warps


# The batches of tests/scenes/qwen3_model's two scenes (4 prompts in 8-token batches; 2 prompts in
# the default 16): the generated source depends on the shapes only, so the sm90 builds here are the
# modules those scenes build and run, one nvcc build each in the default suite instead of two.
SCENE_BATCHES = {False: dict(prompts=((5, 17, 200), (400, 22), (7, 300, 45), (12, 13)), max_batch_tokens=8), True: {}}


@pytest.mark.parametrize("cc", [90, 80])
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_the_whole_model_compiles(cc, moe):
    extra = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64) if moe else {}
    c = Qwen3Config(**TINY, **extra)
    pk = mpk.PersistentKernel(**kernel_params(cc, **SCENE_BATCHES[moe]))
    graph = build_qwen3(pk, c, random_state_dict(c))
    pk.compile()
    tasks = pk.compiled_graph.tasks
    layers = {pk.compiled_graph.layers[t.layer].task for t in tasks}
    common = {"embed", "paged_attention", "linear_with_residual", "argmax_reduce"}
    if moe:  # every RMSNorm a task of its own (qwen3.py's docstring says why)
        assert common | {"rmsnorm", "linear"} <= layers and "rmsnorm_linear" not in layers
    else:  # RMSNorms folded into qkv, gate / up and the lm head
        assert common | {"rmsnorm_linear"} <= layers and not {"rmsnorm", "linear"} & layers
    assert len(graph.k_caches) == 2 and "logits" in graph.intermediates


@pytest.mark.parametrize("batch_tokens, gate_up", [(16, "moe_topk_w13_linear"), (300, "moe_w13_linear")])
def test_moe_gate_up_routes_its_tokens_at_decode_batches(batch_tokens, gate_up):
    """Up to 16384 routing slots (experts x token rows) the gate / up layer routes the tokens itself,
    beside the routing task and on every worker but one; above, it waits for the routing task."""
    c = Qwen3Config(**TINY, num_experts=64, num_experts_per_tok=2, moe_intermediate_size=32)
    pk = mpk.PersistentKernel(**kernel_params(90, prompts=[list(range(batch_tokens))], max_batch_tokens=batch_tokens))
    build_qwen3(pk, c, random_state_dict(c))
    layers = {layer.spec.name: layer for layer in pk._graph.layers}
    assert gate_up in layers and "moe_topk_softmax_routing" in layers
    assert layers[gate_up].grid[0] == (7 if gate_up == "moe_topk_w13_linear" else 8)  # of 8 workers


@pytest.mark.parametrize("batch_tokens, down", [(16, ["moe_w2_mul_sum_add"]), (300, ["moe_w2_linear", "moe_mul_sum_add"])])
def test_moe_down_sums_the_experts_at_decode_batches(batch_tokens, down):
    """Where every task's sums of its hidden columns fit in shared memory (decode batches), the down
    projection sums each token's experts itself, one 16-column slice per worker; above, the down
    projection and the weighted sum are two layers."""
    c = Qwen3Config(**TINY, num_experts=64, num_experts_per_tok=2, moe_intermediate_size=32)
    pk = mpk.PersistentKernel(**kernel_params(90, prompts=[list(range(batch_tokens))], max_batch_tokens=batch_tokens))
    build_qwen3(pk, c, random_state_dict(c))
    layers = {layer.spec.name: layer for layer in pk._graph.layers}
    assert {"moe_w2_mul_sum_add", "moe_w2_linear", "moe_mul_sum_add"} & layers.keys() == set(down)
    if down == ["moe_w2_mul_sum_add"]:
        assert layers["moe_w2_mul_sum_add"].grid[0] == min(8, c.hidden_size // 16)  # of 8 workers


@pytest.mark.parametrize("cc, requests, grid_y", [(90, 2, 2), (90, 8, 1), (80, 8, 2)])
def test_attention_pairs_kv_heads_when_streams_outnumber_the_workers(cc, requests, grid_y):
    """2 kv heads on 8 workers: 2 requests are 4 (request, kv head) streams, one kv head a task (and
    splits); 8 requests are 16 streams, at least 1.5 a worker, so each task takes both kv heads, but
    not in the 4-warp sm80 build (halves of 2 warps)."""
    c = Qwen3Config(**TINY)
    pk = mpk.PersistentKernel(**kernel_params(cc, prompts=[[i + 1] for i in range(requests)]))
    build_qwen3(pk, c, random_state_dict(c))
    attention = [layer for layer in pk._graph.layers if layer.spec.name == "paged_attention"]
    assert len(attention) == c.num_hidden_layers and {layer.grid[1] for layer in attention} == {grid_y}


def test_reference_matches_transformers_qwen3():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.Qwen3Config(**TINY, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False)
    model = transformers.Qwen3ForCausalLM(hf).eval()
    tokens = torch.tensor([3, 77, 401, 12, 9, 250, 1])
    with torch.no_grad():
        want = model(tokens[None]).logits[0]
    got = find_reference("qwen3_logits", layer="qwen3_model")(model.state_dict(), Qwen3Config.from_hf(hf), tokens)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_reference_matches_transformers_qwen3_moe():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.Qwen3MoeConfig(
        **TINY, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=1
    )
    model = transformers.Qwen3MoeForCausalLM(hf).eval()
    tokens = torch.tensor([3, 77, 401, 12, 9])
    with torch.no_grad():
        want = model(tokens[None]).logits[0]
    sd = {k: v for k, v in model.state_dict().items()}
    got = find_reference("qwen3_logits", layer="qwen3_model")(sd, Qwen3Config.from_hf(hf), tokens)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_reference_decodes_like_a_full_forward():
    """The reference's KV-cached greedy steps give the logits a full causal forward of the sequence gives."""
    c = Qwen3Config(**TINY, dtype=torch.bfloat16)
    sd = {k: v.float() for k, v in random_state_dict(c, lm_head_peak=1.0).items()}
    prompt = [5, 6, 7]
    tokens, logits = Qwen3Reference(sd, c).generate(prompt, 6)
    full = Qwen3Reference(sd, c).forward(torch.tensor(prompt + tokens[:-1]))[len(prompt) - 1 :]
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)


def test_unsupported_moe_configs_are_refused():
    base = {**TINY, "num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    with pytest.raises(mpk.ConfigError, match=r"norm_topk_prob=False"):
        Qwen3Config.from_hf({**base, "norm_topk_prob": False})
    with pytest.raises(mpk.ConfigError, match=r"mlp_only_layers"):
        Qwen3Config.from_hf({**base, "norm_topk_prob": True, "mlp_only_layers": [1]})
    assert Qwen3Config.from_hf({**base, "norm_topk_prob": True}).num_experts == 8
