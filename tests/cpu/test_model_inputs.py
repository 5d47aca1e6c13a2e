"""Bad input to the model API (Qwen3Config, Qwen3Grids, build_qwen3, generation_params,
Qwen3Generator, random_state_dict): one clear error each, naming the value, before anything runs."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
import types

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.models import (
    PRESETS,
    Qwen3Config,
    Qwen3Generator,
    Qwen3Grids,
    build_qwen3,
    expected_weights,
    generation_params,
    random_state_dict,
)
from mpk_runtime.models.grids import plan
from mpk_runtime.models.state_dict import check_state_dict

TINY = PRESETS["tiny"]
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64)


def kernel(**extra) -> mpk.PersistentKernel:
    """A compile-only kernel for a 16-row batch: build_qwen3 declares on it, nothing runs."""
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(test_mode=True, compile_only=True, target_cc=90, num_workers=2, max_num_batched_tokens=16)
    p.update(extra)
    return mpk.PersistentKernel(**p)


def generator(prompts=((1, 2),), new=4, **kw) -> Qwen3Generator:
    c = Qwen3Config(**TINY)
    return Qwen3Generator(c, random_state_dict(c), prompts, new, compile_only=True, target_cc=90, num_workers=2, **kw)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(tie_word_embeddings="false"), r"tie_word_embeddings='false' must be True or False"),
        (dict(tie_word_embeddings=1), r"tie_word_embeddings=1 must be True or False"),
        (dict(num_experts=8.5, num_experts_per_tok=2, moe_intermediate_size=64), r"num_experts=8.5 must be an integer >= 0"),
        (dict(num_experts=8, num_experts_per_tok="2", moe_intermediate_size=64), r"num_experts_per_tok='2' must be an integer"),
        (dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=True), r"moe_intermediate_size=True must be an"),
        (dict(num_experts=-1), r"num_experts=-1 must be an integer >= 0 \(0: a dense MLP\)"),
        (dict(rope_theta=float("inf")), r"rope_theta=inf must be a number > 1, finite \(Qwen3: 1e6\)"),
        (dict(rope_theta=float("nan")), r"rope_theta=nan must be a number > 1"),
        (dict(rope_theta=0.5), r"rope_theta=0.5 must be a number > 1"),
        (dict(rope_theta=-1e6), r"rope_theta=-1000000.0 must be a number > 1"),
        (dict(rope_theta="1e6"), r"rope_theta='1e6' must be a number > 1"),
        (dict(rope_theta=True), r"rope_theta=True must be a number > 1"),
        (dict(rope_theta=10**400), r"rope_theta=1000+ must be a number > 1, finite"),
        (dict(rms_norm_eps=float("inf")), r"rms_norm_eps=inf must be a positive number, finite"),
        (dict(hidden_size=128.0), r"hidden_size=128.0 must be a positive integer"),
    ],
)
def test_every_config_field_is_checked_for_type_and_range(change, match):
    with pytest.raises(mpk.ConfigError, match=match):
        Qwen3Config(**{**TINY, **change})


def test_a_string_tie_flag_cannot_drop_the_checkpoints_lm_head():
    """tie_word_embeddings="false" used to count as true, and check_state_dict then left the
    checkpoint's own lm_head.weight out."""
    sd = random_state_dict(Qwen3Config(**TINY))
    with pytest.raises(mpk.ConfigError, match="tie_word_embeddings"):
        check_state_dict(Qwen3Config(**TINY, tie_word_embeddings="false"), sd)
    assert "lm_head.weight" in check_state_dict(Qwen3Config(**TINY, tie_word_embeddings=False), sd)


def test_valid_configs_still_build_copy_and_replace():
    c = Qwen3Config(**TINY, rope_theta=10000, **MOE)  # an int theta, as some HF configs give it
    assert copy.deepcopy(c) == c and pickle.loads(pickle.dumps(c)) == c
    assert dataclasses.replace(c, num_hidden_layers=1).num_hidden_layers == 1
    assert Qwen3Config(128, 256, 4, 2, 64, 2, 512) == Qwen3Config(**TINY)  # positional arguments


def test_unknown_config_keyword_suggests_the_field():
    with pytest.raises(mpk.ConfigError, match=r"unknown Qwen3Config parameter 'hidden'; did you mean 'hidden_size'\?"):
        Qwen3Config(**TINY, hidden=128)
    with pytest.raises(mpk.ConfigError, match=r"unknown Qwen3Config parameter 'zzz'; known parameters: dtype, head_dim"):
        Qwen3Config(**TINY, zzz=1)


def test_unknown_generator_keyword_suggests_its_own_name_first():
    with pytest.raises(
        mpk.ConfigError, match=r"unknown Qwen3Generator parameter 'max_batch_token'; did you mean 'max_batch_tokens'"
    ):
        generator(max_batch_token=16)
    with pytest.raises(mpk.ConfigError, match=r"'num_worker'; did you mean 'num_workers'\?"):
        generator(num_worker=4)


@pytest.mark.parametrize("eos", [2**63, 2**64 + 5, -(2**63) - 1])
def test_eos_token_id_beyond_int64_is_refused_by_the_generator(eos):
    with pytest.raises(mpk.ConfigError, match=rf"eos_token_id={eos} must be an integer .* \[-2\*\*63, 2\*\*63 - 1\]"):
        generator(eos_token_id=eos)


def test_eos_token_id_beyond_int64_is_refused_by_the_kernel():
    with pytest.raises(mpk.ConfigError, match=r"eos_token_id=1180591620717411303424 must be an integer"):
        kernel(eos_token_id=2**70)


@pytest.mark.parametrize("page_size", [0, -4, 2.0, True])
def test_page_size_is_named_not_a_setting_derived_from_it(page_size):
    with pytest.raises(mpk.ConfigError, match=rf"generate: page_size={page_size!r} must be a positive integer"):
        generation_params([[1, 2]], 4, page_size=page_size)
    with pytest.raises(mpk.ConfigError, match=rf"page_size={page_size!r}"):
        generator(page_size=page_size)


@pytest.mark.parametrize("batch", [0, -1, True, 16.0])
def test_max_batch_tokens_is_never_silently_replaced(batch):
    with pytest.raises(mpk.ConfigError, match=rf"generate: max_batch_tokens={batch!r} must be a positive integer"):
        generation_params([[1, 2]], 4, max_batch_tokens=batch)


@pytest.mark.parametrize("new", [True, 2.0, "4", -1, 2**31])
def test_max_new_tokens_must_be_an_int_that_fits_a_row(new):
    with pytest.raises(
        mpk.ConfigError, match=rf"generate: max_new_tokens={new!r} must be a positive integer \(at most 2147483645\)"
    ):
        generation_params([[1, 2]], new)


@pytest.mark.parametrize(
    "prompts, match",
    [
        ([[1.7, 2.9]], r"prompt 0 holds token id 1.7 \(float\); token ids are integers"),
        ([[1], [2, True]], r"prompt 1 holds token id True \(bool\)"),
        ([[1, -1]], r"prompt 0 holds token id -1, outside \[0, 2\*\*63\)"),
        ([[2**63]], r"prompt 0 holds token id 9223372036854775808, outside"),
        ("hello", r"prompts='hello' must be a list of prompts, each a list of token ids, or a 2-D integer tensor"),
        (["hello"], r"prompt 0 is 'hello' \(str\); each prompt is a list of token ids"),
        ([1, 2], r"prompt 0 is 1 \(int\)"),
        (None, r"prompts=None must be a list of prompts"),
        ([], r"give at least one prompt"),
        ([[1], []], r"prompt 1 is empty"),
        (torch.tensor([1, 2]), r"a tensor of prompts must be 2-D \(a prompt a row\), got shape \(2,\); .*prompts\[None\]"),
        (torch.tensor([[1.5, 2.0]]), r"prompt 0 holds token id 1.5 \(float\)"),
    ],
)
def test_bad_prompts_are_named(prompts, match):
    with pytest.raises(mpk.ConfigError, match=match):
        generation_params(prompts, 4)


def test_prompts_as_an_integer_tensor_or_tensors_are_the_same_as_lists():
    want = generation_params([[1, 2, 3], [4, 5, 6]], 4)["meta_tensors"]
    for prompts in (torch.tensor([[1, 2, 3], [4, 5, 6]]), [torch.tensor([1, 2, 3]), (4, torch.tensor(5), 6)]):
        got = generation_params(prompts, 4)["meta_tensors"]
        assert all(torch.equal(got[k], want[k]) for k in want)


def test_token_ids_are_checked_against_the_vocabulary_where_given():
    with pytest.raises(mpk.ConfigError, match=r"prompt 0 holds token id 7, outside the vocabulary \[0, 7\)"):
        generation_params([[1, 7]], 4, vocab_size=7)
    with pytest.raises(mpk.ConfigError, match=r"vocab_size=0 must be a positive integer"):
        generation_params([[1]], 4, vocab_size=0)
    assert generator(torch.tensor([[1, 2, 3]])).prompt_lengths == [3]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(attention_kv_heads_per_task=0), r"Qwen3Grids: attention_kv_heads_per_task=0 must be an integer >= 1"),
        (dict(attention_kv_heads_per_task=3), r"attention_kv_heads_per_task=3 must be 1 or 2"),
        (dict(qkv=0), r"Qwen3Grids: qkv=0 must be an integer >= 1"),
        (dict(embed=2.0), r"Qwen3Grids: embed=2.0 must be an integer >= 1"),
        (dict(lm_head=True), r"Qwen3Grids: lm_head=True must be an integer"),
        (dict(router=-1), r"Qwen3Grids: router=-1 must be an integer >= 0 \(0 in a dense model\)"),
    ],
)
def test_grids_are_checked_when_made(change, match):
    g = plan(Qwen3Config(**TINY), 2, 16, 1)
    with pytest.raises(mpk.ConfigError, match=match):
        dataclasses.replace(g, **change)


@pytest.mark.parametrize(
    "shape, change, match",
    [
        (dict(num_attention_heads=2, num_key_value_heads=1), dict(attention_kv_heads_per_task=2), r"does not divide .*=1; use 1"),
        (MOE, dict(router=0), r"router=0 in a MoE model \(num_experts=8\); give it >= 1 tasks"),
        (MOE, dict(experts=0), r"experts=0 in a MoE model"),
        ({}, dict(router=3), r"router=3 in a dense model \(num_experts=0\); set it to 0"),
    ],
)
def test_grids_are_checked_against_the_model(shape, change, match):
    c = Qwen3Config(**{**TINY, **shape})
    g = dataclasses.replace(plan(c, 2, 16, 1), **change)
    with pytest.raises(mpk.ConfigError, match=match):
        build_qwen3(kernel(), c, random_state_dict(c), grids=g)


def test_grids_must_be_a_qwen3_grids():
    c = Qwen3Config(**TINY)
    with pytest.raises(mpk.ConfigError, match=r"grids must be a Qwen3Grids, got dict \(\{'embed': 1\}\); .*dataclasses.replace"):
        build_qwen3(kernel(), c, random_state_dict(c), grids={"embed": 1})
    assert isinstance(build_qwen3(kernel(), c, random_state_dict(c), grids=plan(c, 2, 16, 1)).grids, Qwen3Grids)


@pytest.mark.parametrize("key, shown", [(5, "5 (int)"), (None, "None (NoneType)"), (("a", 1), "('a', 1) (tuple)")])
def test_state_dict_keys_must_be_names(key, shown):
    c = Qwen3Config(**TINY)
    sd = {**random_state_dict(c), key: torch.zeros(1)}
    with pytest.raises(mpk.WeightError, match=re.escape(f"state_dict key {shown} is not a weight name; keys are Hugging Face")):
        build_qwen3(kernel(), c, sd)


def meta_weights(c: Qwen3Config) -> dict[str, torch.Tensor]:
    return {k: torch.empty(s, dtype=c.dtype, device="meta") for k, s in expected_weights(c).items()}


@pytest.mark.parametrize("shape", [{}, MOE], ids=["dense", "moe"])
def test_meta_weights_declare_a_compile_only_model(shape):
    c = Qwen3Config(**{**TINY, **shape})
    pk = kernel()
    build_qwen3(pk, c, meta_weights(c))
    assert pk.tensor("model.embed_tokens.weight").is_meta


def test_meta_weights_cannot_run():
    c = Qwen3Config(**TINY)
    pk = kernel(compile_only=False, emulate=True)
    with pytest.raises(mpk.DeviceError, match=r"'model.embed_tokens.weight' is on meta.*pass tensor.to\('cpu'\)"):
        build_qwen3(pk, c, meta_weights(c))


def test_a_tokens_tensor_past_the_memory_budget_names_max_new_tokens(monkeypatch):
    """The tokens meta tensor holds every prompt's row of the longest prompt + max_new_tokens: past
    the memory budget, generate says so before allocating it."""
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "1M")
    with pytest.raises(
        mpk.MemoryBudgetError,
        match=r"^generate: the tokens meta tensor \(i64 \[2, 200002\]: 2 rows of the longest prompt's 2 \+ "
        r"max_new_tokens=200000 tokens\) needs 3.05 MiB of host memory, more than the 1 MiB set by MPK_MEMORY_LIMIT; "
        r"ask for fewer new tokens than max_new_tokens=200000, or set MPK_MEMORY_LIMIT",
    ):
        generation_params([[1, 2], [3]], 200_000)


def test_a_cache_past_the_memory_budget_names_max_new_tokens(monkeypatch):
    """The KV cache is sized by the prompts and max_new_tokens: past the memory budget the generator
    says so before the kernel allocates anything (10**8 new tokens of the tiny model had ended in
    torch's allocator failing to find 25.6 GB)."""
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "64M")
    with pytest.raises(
        mpk.MemoryBudgetError,
        match=r"^Qwen3Generator: the K and V caches of 2 layers \(4 x bf16 \[62501, 16, 2, 64\]\) needs 977 MiB "
        r"\(1.19 GiB in all with 1 more\) of host memory, more than the 64 MiB set by MPK_MEMORY_LIMIT; ask for fewer "
        r"new tokens than max_new_tokens=1000000, or pass fewer or shorter prompts \(each prompt's cache holds its own "
        r"tokens \+ max_new_tokens\)",
    ):
        generator(new=10**6)


def test_build_qwen3_checks_its_cache_against_the_memory_budget(monkeypatch):
    pk = kernel(max_seq_length=2**20, max_num_pages=2**16, page_size=16)
    monkeypatch.setenv("MPK_MEMORY_LIMIT", "64M")
    with pytest.raises(
        mpk.MemoryBudgetError,
        match=r"^build_qwen3: the K and V caches of 2 layers \(4 x bf16 \[65536, 16, 2, 64\]\) needs 1 GiB .*; use a "
        r"shorter max_seq_length \(now 1048576\) or fewer max_num_pages \(now 65536\), or set MPK_MEMORY_LIMIT",
    ):
        build_qwen3(pk, Qwen3Config(**TINY), meta_weights(Qwen3Config(**TINY)))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(seed="a"), r"random_state_dict: seed='a' must be an integer in \[-2\*\*63, 2\*\*64\)"),
        (dict(seed=1.5), r"seed=1.5 must be an integer"),
        (dict(seed=True), r"seed=True must be an integer"),
        (dict(seed=2**64), r"seed=18446744073709551616 must be an integer"),
        (dict(residual_scale=float("nan")), r"residual_scale=nan must be a finite number >= 0"),
        (dict(lm_head_peak=-1.0), r"lm_head_peak=-1.0 must be a finite number >= 0"),
        (dict(lm_head_peak="4"), r"lm_head_peak='4' must be a finite number >= 0"),
    ],
)
def test_random_state_dict_arguments(kw, match):
    with pytest.raises(mpk.ConfigError, match=match):
        random_state_dict(Qwen3Config(**TINY), **kw)


def test_random_state_dict_seeds_as_before():
    c = Qwen3Config(**TINY)
    a, b = random_state_dict(c, seed=-1), random_state_dict(c, seed=2**64 - 1)
    assert all(torch.equal(a[k], b[k]) for k in a)  # torch's seed range: -1 is 2**64 - 1


def test_a_hf_config_without_the_model_shape():
    with pytest.raises(mpk.ConfigError, match=r"from_hf: the config has no hidden_size, .*vocab_size; is it a Qwen3"):
        Qwen3Config.from_hf({"model_type": "bert"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error of a machine without a GPU")
def test_a_generator_for_the_gpu_on_a_machine_without_one():
    c = Qwen3Config(**TINY)
    with pytest.raises(mpk.DeviceError, match=r"Qwen3Generator needs a CUDA GPU and torch sees none .* pass emulate=True"):
        Qwen3Generator(c, random_state_dict(c), [[1, 2]], 4)


def test_weights_on_more_than_one_device():
    c = Qwen3Config(**TINY)
    sd = random_state_dict(c)
    sd["model.layers.0.self_attn.k_proj.weight"] = sd["model.layers.0.self_attn.k_proj.weight"].to("meta")
    with pytest.raises(mpk.WeightError, match=r"state_dict holds weights on 2 devices \(.* on cpu, .*k_proj.weight' on meta\)"):
        check_state_dict(c, sd)


def test_a_tied_config_refuses_an_lm_head_of_its_own():
    """A tied config decodes with the embedding: an untied checkpoint's lm_head.weight had been
    dropped without a word (the reference used it, and the tokens differed)."""
    untied = random_state_dict(Qwen3Config(**TINY), seed=1, lm_head_peak=4.0)
    tied = Qwen3Config(**TINY, tie_word_embeddings=True)
    with pytest.raises(mpk.WeightError, match=r"lm_head.weight'\] is not the embedding table, .*set tie_word_embeddings=False"):
        check_state_dict(tied, untied)
    with pytest.raises(mpk.WeightError, match=r"is not the embedding table"):
        check_state_dict(tied, {**untied, "lm_head.weight": torch.randn(3, 3)})
    embed = untied["model.embed_tokens.weight"]
    for head in (embed, embed.clone()):  # as a tied HF model's state_dict lists it: the table itself, or a copy
        assert "lm_head.weight" not in check_state_dict(tied, {**untied, "lm_head.weight": head})


def test_the_kernel_holds_a_snapshot_of_every_weight():
    """Fused weights (q / k / v, gate / up) are copies; the others had been the caller's own tensors,
    so a state_dict changed after the build reached some layers and not others. And an untied config
    whose lm head is the embedding tensor itself (a tied checkpoint's state_dict) had been refused as
    memory attached twice."""
    c = Qwen3Config(**TINY)
    sd = random_state_dict(c)
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    gen = Qwen3Generator(c, sd, [[1, 2]], 4, compile_only=True, target_cc=90, num_workers=2)
    theirs = {t.untyped_storage().data_ptr() for t in sd.values()}
    attached = [n for n in expected_weights(c) if "proj" not in n or "o_proj" in n or "down_proj" in n]  # the unfused
    assert [n for n in attached if gen.pk.tensor(n).untyped_storage().data_ptr() in theirs] == []
    assert torch.equal(gen.pk.tensor("model.norm.weight"), sd["model.norm.weight"])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(test_mode=True), r"Qwen3Generator: test_mode=True is the generator's own \(it decodes in offline mode"),
        (dict(max_seq_length=50), r"max_seq_length=50 is the generator's own \(the longest prompt \+ max_new_tokens\)"),
        (dict(meta_tensors={}), r"meta_tensors={} is the generator's own \(made from the prompts\); leave it out"),
        (dict(max_num_batched_tokens=8), r"max_num_batched_tokens=8 is the generator's own \(set by max_batch_tokens=\)"),
    ],
)
def test_kernel_parameters_the_generator_derives_are_refused(kw, match):
    """test_mode=True had decoded one step and returned zeros as generated tokens."""
    with pytest.raises(mpk.ConfigError, match=match):
        generator(**kw)


@pytest.mark.parametrize("config", [dict(TINY), types.SimpleNamespace(**TINY)], ids=["a dict", "a namespace"])
def test_a_config_of_another_class_is_named(config):
    want = r"config must be an mpk_runtime.models.Qwen3Config, got .*; for a Hugging Face config use Qwen3Config.from_hf"
    for call in (
        lambda: Qwen3Generator(config, {}, [[1]], 2, compile_only=True),
        lambda: expected_weights(config),
        lambda: random_state_dict(config),
        lambda: check_state_dict(config, {}),
    ):
        with pytest.raises(mpk.ConfigError, match=want):
            call()


@pytest.mark.parametrize(
    "change, name",
    [(dict(moe_intermediate_size=40), "moe_intermediate_size=40"), (dict(hidden_size=112), "hidden_size=112")],
)
def test_a_moe_config_needs_sizes_the_expert_linears_take(change, name):
    """Had built, and then failed inside the kernel's declaration with a layer's internal shape."""
    with pytest.raises(mpk.ConfigError, match=rf"Qwen3Config: {name} must be a multiple of 32 in a MoE model"):
        Qwen3Config(**{**TINY, **MOE, "num_attention_heads": 2, "num_key_value_heads": 1, **change})


@pytest.mark.parametrize(
    "extra, match",
    [
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), r"rope scaling 'yarn' is not supported"),
        (dict(rope_scaling={"type": "linear", "factor": 2.0}), r"rope scaling 'linear' is not supported"),
        (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5}), r"rope scaling 'llama3' is not supported"),
        (dict(use_sliding_window=True, sliding_window=4), r"use_sliding_window=True is not supported"),
        (dict(hidden_act="gelu"), r"hidden_act='gelu' is not supported"),
        (dict(attention_bias=True), r"attention_bias=True is not supported"),
    ],
)
def test_a_hf_config_that_changes_the_model_is_refused(extra, match):
    """Each had been ignored: the runtime would decode another model than the checkpoint's."""
    with pytest.raises(mpk.ConfigError, match=rf"^Qwen3Config.from_hf: {match}"):
        Qwen3Config.from_hf({**TINY, **extra})


def test_a_hf_config_gives_its_dtype_where_the_model_runs_in_it():
    plain = {**TINY, "rope_scaling": None, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    assert Qwen3Config.from_hf({**plain, "torch_dtype": "float16"}).dtype == torch.float16
    assert Qwen3Config.from_hf({**plain, "dtype": torch.bfloat16}).dtype == torch.bfloat16
    assert Qwen3Config.from_hf({**plain, "torch_dtype": "float32"}).dtype == torch.bfloat16  # then check_state_dict says convert


def test_a_peaked_lm_head_for_a_tied_config_is_refused():
    with pytest.raises(mpk.ConfigError, match=r"lm_head_peak=1.0 shapes an lm head of its own, which a tied config"):
        random_state_dict(Qwen3Config(**TINY, tie_word_embeddings=True), lm_head_peak=1.0)


@pytest.mark.parametrize(
    "rename, fix",
    [
        (lambda k: "module." + k, r"names it 'module.model.embed_tokens.weight': pass \{k.removeprefix\('module.'\)"),
        (lambda k: "_orig_mod." + k, r"names it '_orig_mod.model.embed_tokens.weight': pass \{k.removeprefix\('_orig_mod.'\)"),
        (lambda k: k.removeprefix("model."), r"names it 'embed_tokens.weight', without 'model.': pass \{'model.' \+ k"),
    ],
    ids=["DDP", "torch.compile", "a bare Qwen3Model"],
)
def test_a_checkpoint_with_another_prefix_says_how_to_rename(rename, fix):
    c = Qwen3Config(**TINY)
    sd = {rename(k): v for k, v in random_state_dict(c).items()}
    with pytest.raises(mpk.WeightError, match=rf"state_dict has no 'model.embed_tokens.weight' .*; the checkpoint {fix}"):
        check_state_dict(c, sd)


def test_integer_sizes_of_any_integer_type_are_plain_ints():
    """NumPy and 0-d torch integers (a config read from an array) had been refused as not integers."""
    np = pytest.importorskip("numpy")
    c = Qwen3Config(**{**TINY, "hidden_size": np.int64(128), "vocab_size": torch.tensor(512)})
    assert (c.hidden_size, c.vocab_size) == (128, 512) and type(c.hidden_size) is int and type(c.vocab_size) is int
    assert c == Qwen3Config(**TINY)
