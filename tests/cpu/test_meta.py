"""The eleven meta tensors: default shapes, dtypes and contents, the request count, and the
validation of user overrides (every MetaTensorError / ConfigError names the rule and the fix)."""

from __future__ import annotations

import json
import re

import pytest
import torch

import mpk_runtime as mpk
from mpk_runtime.errors import ConfigError, MetaTensorError
from mpk_runtime.frontend import meta, params

CPU = torch.device("cpu")
I32, I64 = torch.int32, torch.int64
SIZES = dict(max_num_batched_tokens=6, max_num_batched_requests=3, max_num_pages=7, page_size=2, max_seq_length=1500)


def build(**overrides) -> dict[str, torch.Tensor]:
    p = mpk.PersistentKernel.get_default_init_parameters()
    p.update(overrides)
    return meta.build(params.parse(p), CPU)


def expected_shapes(requests: int, t: int = 6, r: int = 3, pages: int = 7, seq: int = 1500) -> dict:
    return {
        "tokens": ((requests, seq), I64),
        "step": ((requests,), I32),
        "prompt_lengths": ((requests,), I32),
        "stop_lengths": ((requests,), I32),
        "input_tokens": ((t,), I64),
        "output_tokens": ((t,), I64),
        "num_new_tokens": ((1,), I32),
        "qo_indptr_buffer": ((r + 1,), I32),
        "paged_kv_indptr_buffer": ((r + 1,), I32),
        "paged_kv_indices_buffer": ((pages,), I32),
        "paged_kv_last_page_len_buffer": ((r,), I32),
    }


def test_eleven_meta_tensors_with_their_shapes_and_dtypes():
    m = build(**SIZES)
    assert list(m) == list(meta.NAMES) and len(m) == 11
    got = {name: (tuple(t.shape), t.dtype) for name, t in m.items()}
    assert got == expected_shapes(requests=1)
    assert all(t.is_contiguous() and t.device == CPU for t in m.values())


def test_default_contents_are_useful():
    """One request whose prompt is the whole token budget: the first batch is full."""
    m = build(**SIZES)
    tokens = m["tokens"].flatten()
    assert tokens[:3].tolist() == [1, 2, 3]
    assert tokens[999:1002].tolist() == [1000, 1, 2]  # ids 1..1000, repeating
    assert int(tokens.min()) == 1 and int(tokens.max()) == 1000
    assert m["prompt_lengths"].tolist() == [SIZES["max_num_batched_tokens"]]
    assert m["stop_lengths"].tolist() == [SIZES["max_seq_length"]]  # a full row
    for name in meta.NAMES[4:]:
        assert not m[name].any(), name  # filled by prepare_next_batch (or sampling)
    assert m["step"].tolist() == [0]


def test_defaults_of_the_default_parameters():
    m = build()
    assert {n: tuple(t.shape) for n, t in m.items()} == {
        n: s for n, (s, _) in expected_shapes(requests=1, t=1, r=1, pages=1, seq=1).items()
    }
    assert m["tokens"].tolist() == [[1]] and m["prompt_lengths"].tolist() == [1]


@pytest.mark.parametrize("source", ["tokens", "prompt_lengths", "stop_lengths"])
def test_total_num_requests_comes_from_tokens_or_prompt_lengths(source):
    given = {
        "tokens": torch.ones(4, 1500, dtype=I64),
        "prompt_lengths": torch.full((4,), 2, dtype=I32),
        "stop_lengths": torch.full((4,), 1500, dtype=I32),
    }[source]
    m = build(**SIZES, meta_tensors={source: given})
    assert m[source] is given  # overrides are used as they are, not copied
    assert {n: (tuple(t.shape), t.dtype) for n, t in m.items()} == expected_shapes(requests=4)
    assert meta.total_num_requests({source: given}) == 4


def test_total_num_requests_defaults_to_one():
    assert meta.total_num_requests({}) == 1


def test_tokens_and_prompt_lengths_must_agree_on_the_request_count():
    with pytest.raises(
        MetaTensorError,
        match=r"'prompt_lengths' has shape \(3,\); with these parameters it must be "
        r"\(2,\) \(total_num_requests, 2 from the rows of 'tokens'\)",
    ):
        build(**SIZES, meta_tensors={"tokens": torch.ones(2, 1500, dtype=I64), "prompt_lengths": torch.ones(3, dtype=I32)})


def test_unknown_meta_tensor_suggests_the_close_name():
    with pytest.raises(MetaTensorError, match=r"unknown meta tensor 'prompt_length'; did you mean 'prompt_lengths'\?"):
        build(meta_tensors={"prompt_length": torch.ones(1, dtype=I32)})


def test_unknown_meta_tensor_without_a_close_name_lists_them():
    with pytest.raises(MetaTensorError, match=r"unknown meta tensor 'xyz'; known: tokens, step, .*paged_kv_last_page_len"):
        build(meta_tensors={"xyz": torch.ones(1, dtype=I32)})


def test_meta_tensor_must_be_a_tensor():
    with pytest.raises(
        MetaTensorError,
        match=r"meta tensor 'step' must be a torch.Tensor, got \[0\] \(list\); pass torch.tensor\(\.\.\., dtype=torch.int32\) "
        r"of shape \(\d+,\)",
    ):
        build(meta_tensors={"step": [0]})


@pytest.mark.parametrize(
    ("name", "shape", "wrong"), [("tokens", (1, 1500), I32), ("step", (1,), I64), ("qo_indptr_buffer", (4,), torch.float32)]
)
def test_wrong_dtype_names_the_conversion(name, shape, wrong):
    right = expected_shapes(1)[name][1]
    with pytest.raises(MetaTensorError, match=rf"'{name}' has dtype {wrong}; it must be {right}: pass t.to\({right}\)"):
        build(**SIZES, meta_tensors={name: torch.zeros(shape, dtype=wrong)})


RULES = [
    ("tokens", (1, 1499), I64, "total_num_requests x max_seq_length"),
    ("input_tokens", (5,), I64, "max_num_batched_tokens"),
    ("output_tokens", (7,), I64, "max_num_batched_tokens"),
    ("num_new_tokens", (2,), I32, "one element"),
    ("qo_indptr_buffer", (3,), I32, "max_num_batched_requests + 1"),
    ("paged_kv_indptr_buffer", (3,), I32, "max_num_batched_requests + 1"),
    ("paged_kv_indices_buffer", (6,), I32, "max_num_pages"),
    ("paged_kv_last_page_len_buffer", (4,), I32, "max_num_batched_requests"),
]


@pytest.mark.parametrize(("name", "shape", "dtype", "rule"), RULES, ids=[r[0] for r in RULES])
def test_wrong_shape_names_the_rule(name, shape, dtype, rule):
    want = expected_shapes(1)[name][0]
    message = f"meta tensor {name!r} has shape {shape}; with these parameters it must be {want} ({rule})"
    with pytest.raises(MetaTensorError, match=re.escape(message)):
        build(**SIZES, meta_tensors={name: torch.zeros(shape, dtype=dtype)})


def test_non_contiguous_override_is_rejected():
    tokens = torch.ones(1500, 2, dtype=I64).t()  # shape (2, 1500), strides (1, 2): not row-major
    assert not tokens.is_contiguous()
    with pytest.raises(MetaTensorError, match=r"'tokens' is not contiguous; pass t.contiguous\(\)"):
        build(**SIZES, meta_tensors={"tokens": tokens})


def test_strided_1d_override_is_rejected():
    step = torch.zeros(4, dtype=I32)[::2]  # two requests, every other element
    assert not step.is_contiguous()
    with pytest.raises(MetaTensorError, match=r"'step' is not contiguous"):
        build(**SIZES, meta_tensors={"step": step})


@pytest.mark.parametrize("length", [0, -1])
def test_prompt_lengths_below_one(length):
    lengths = torch.tensor([5, length], dtype=I32)
    with pytest.raises(MetaTensorError, match=rf"prompt_lengths\[1\] = {length} must be in \[1, max_seq_length=1500\]"):
        build(**SIZES, meta_tensors={"prompt_lengths": lengths})


def test_prompt_longer_than_max_seq_length():
    lengths = torch.tensor([5, 1501], dtype=I32)
    with pytest.raises(
        MetaTensorError,
        match=r"prompt_lengths\[1\] = 1501 must be in \[1, max_seq_length=1500\].*"
        r"Set params\['max_seq_length'\] >= 1501 or shorten the prompt",
    ):
        build(**SIZES, meta_tensors={"prompt_lengths": lengths})


@pytest.mark.parametrize(
    ("stops", "steps", "low", "why"),
    [
        ([9, 5], [0, 0], 6, "its prompt of 5 tokens and at least one generated; pass a value in that range"),
        ([9, 1501], [0, 0], 6, "its prompt of 5 tokens and at least one generated; pass a value in that range"),
        ([9, 7], [0, 7], 8, "its 7 tokens of history and at least one generated"),
    ],
)
def test_stop_lengths_outside_the_row(stops, steps, low, why):
    """A request samples a token after its prompt before it can stop, and its row has max_seq_length slots."""
    given = {
        "prompt_lengths": torch.tensor([4, 5], dtype=I32),
        "stop_lengths": torch.tensor(stops, dtype=I32),
        "step": torch.tensor(steps, dtype=I32),
    }
    message = (
        f"stop_lengths[1] = {stops[1]} must be in [{low}, max_seq_length=1500]: request 1 finishes once its row holds "
        f"that many tokens, {why}"
    )
    with pytest.raises(MetaTensorError, match=re.escape(message)):
        build(**SIZES, meta_tensors=given)


def test_a_stop_past_a_full_prompt_says_to_raise_max_seq_length():
    given = {"prompt_lengths": torch.tensor([1500], dtype=I32), "stop_lengths": torch.tensor([1500], dtype=I32)}
    message = r"stop_lengths\[0\] = 1500 must be in \[1501, max_seq_length=1500\]: .*; raise max_seq_length"
    with pytest.raises(MetaTensorError, match=message):
        build(**SIZES, meta_tensors=given)


def test_stop_lengths_from_one_past_the_prompt_to_a_full_row_are_accepted():
    given = {"prompt_lengths": torch.tensor([4, 5], dtype=I32), "stop_lengths": torch.tensor([5, 1500], dtype=I32)}
    assert build(**SIZES, meta_tensors=given)["stop_lengths"].tolist() == [5, 1500]


def test_prompt_as_long_as_the_row_is_accepted():
    m = build(**SIZES, meta_tensors={"prompt_lengths": torch.tensor([1500], dtype=I32)})
    assert m["prompt_lengths"].tolist() == [1500]


def test_default_prompt_longer_than_max_seq_length():
    """Offline mode fits nothing by itself: the settings are the user's to choose."""
    with pytest.raises(
        ConfigError,
        match=r"default prompt is max_num_batched_tokens=8 tokens long, which does not fit "
        r"max_seq_length=4.*Set params\['max_seq_length'\] >= 8$",
    ):
        build(max_num_batched_tokens=8, max_seq_length=4, max_num_pages=8)


def test_one_error_names_every_setting_to_change():
    with pytest.raises(ConfigError) as e:
        build(max_num_batched_tokens=8, page_size=2)
    message = str(e.value)
    assert "max_seq_length=1" in message and "needs 4 KV pages of page_size=2, but max_num_pages=1" in message
    assert message.endswith("Set params['max_seq_length'] >= 8, params['max_num_pages'] >= 4")


@pytest.mark.parametrize(("page_size", "pages"), [(1, 8), (2, 4), (3, 3)])
def test_test_mode_fits_settings_to_the_default_prompt(make_pk, page_size, pages):
    """Test mode's default prompt is max_num_batched_tokens long: the rows and pages it needs are
    made to fit, and pk.params shows what is used."""
    pk = make_pk(90, test_mode=True, max_num_batched_tokens=8, page_size=page_size)
    assert (pk.params.max_seq_length, pk.params.max_num_pages) == (8, pages)
    assert pk.params.fitted == {"max_seq_length": (1, 8), "max_num_pages": (1, pages)}
    assert pk.meta_tensors["tokens"].shape == (1, 8) and pk.meta_tensors["paged_kv_indices_buffer"].shape == (pages,)
    assert pk.meta_tensors["prompt_lengths"].tolist() == [8]


def test_test_mode_keeps_settings_that_already_fit(make_pk):
    pk = make_pk(90, test_mode=True, max_num_batched_tokens=8, max_seq_length=32, max_num_pages=9)
    assert (pk.params.max_seq_length, pk.params.max_num_pages, pk.params.fitted) == (32, 9, {})


def test_test_mode_leaves_a_users_prompt_to_the_user():
    """With a prompt of the user's, nothing grows: one error lists every setting the prompts need."""
    with pytest.raises(MetaTensorError) as e:
        build(test_mode=True, max_num_batched_tokens=4, meta_tensors={"prompt_lengths": torch.tensor([10, 3], dtype=I32)})
    assert str(e.value).endswith(
        "Set params['max_seq_length'] >= 10, params['max_num_batched_tokens'] >= 10, params['max_num_pages'] >= 10 "
        "or shorten the prompt"
    )


def test_test_mode_does_not_grow_what_an_override_fixes():
    """paged_kv_indices_buffer's length is max_num_pages: the error says both must change."""
    indices = torch.zeros(1, dtype=I32)
    with pytest.raises(ConfigError, match=r"params\['max_num_pages'\] >= 4 \(and the shape of paged_kv_indices_buffer\)"):
        build(test_mode=True, max_num_batched_tokens=4, meta_tensors={"paged_kv_indices_buffer": indices})


def test_the_signature_records_the_settings_used(make_pk, tmp_path):
    pk = make_pk(80, test_mode=True, max_num_batched_tokens=4)
    a = pk.attach_input(torch.zeros(4, 8, dtype=I32), "a")
    b = pk.attach_input(torch.zeros(4, 8, dtype=I32), "b")
    pk.noop_layer(inputs=[a], outputs=[b], grid_dim=(4, 1, 1), block_dim=pk.block_dim)
    pk.compile(output_dir=tmp_path)
    saved = json.loads((tmp_path / "signature_rank0.json").read_text())["params"]
    assert (saved["max_seq_length"], saved["max_num_pages"]) == (4, 4)


def test_first_chunk_page_shortage_is_checked_in_every_mode():
    """Admission waits for free pages, so a first chunk bigger than the whole pool would wait
    forever: offline mode refuses it at build time too."""
    with pytest.raises(ConfigError, match=r"request 0: its first prefill chunk of 8 tokens needs 4 KV pages"):
        build(max_num_batched_tokens=8, max_seq_length=16, page_size=2, max_num_pages=3)
    m = build(max_num_batched_tokens=8, max_seq_length=16, page_size=2, max_num_pages=4)
    assert m["paged_kv_indices_buffer"].shape == (4,)


def test_zero_requests_is_a_meta_tensor_error():
    with pytest.raises(MetaTensorError, match="tokens"):
        build(test_mode=True, meta_tensors={"tokens": torch.zeros(0, 1, dtype=I64)})


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        build(meta_tensors={"step": torch.zeros(1, dtype=I64)})


def test_compile_only_kernel_has_all_meta_tensors(make_pk):
    pk = make_pk(90, test_mode=True, **SIZES)
    assert {n: (tuple(t.shape), t.dtype) for n, t in pk.meta_tensors.items()} == expected_shapes(requests=1)


def test_compile_only_kernel_validates_overrides(make_pk):
    with pytest.raises(MetaTensorError, match="'num_new_tokens' has shape"):
        make_pk(80, meta_tensors={"num_new_tokens": torch.zeros(3, dtype=I32)})


def test_compile_only_kernel_checks_the_default_prompt(make_pk):
    """No GPU is needed to know that the default prompt cannot fit its row."""
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens=8 .* max_seq_length=4"):
        make_pk(80, max_num_batched_tokens=8, max_seq_length=4, max_num_pages=8)


def test_compile_only_kernel_checks_pages(make_pk):
    with pytest.raises(ConfigError, match=r"needs 8 KV pages of page_size=1, but max_num_pages=1"):
        make_pk(90, max_num_batched_tokens=8, max_seq_length=8)


def test_a_meta_device_override_holds_no_data():
    with pytest.raises(
        MetaTensorError, match=r"meta tensor 'step' is a tensor on the meta device, which holds no data; make it on cpu"
    ):
        build(**SIZES, meta_tensors={"step": torch.zeros(1, dtype=I32, device="meta")})
