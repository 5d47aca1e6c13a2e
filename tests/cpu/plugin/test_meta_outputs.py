"""Out(..., meta=True) is the kernel's meta tensor of its name: a layer that writes output_tokens
(sampling) writes the kernel's own output_tokens, which prepare_next_batch reads, and what it wrote
is compared with the golden. An output that merely has a meta tensor's name is an ordinary output."""

from __future__ import annotations

import glob

import pytest

SCENE = """
import torch
from pytest_mpk import Case, Out, SceneTestCase, scene_test

@scene_test(layer="argmax_reduce")
class TestSample(SceneTestCase):
    CASES = [Case("b2")]

    def kernel_params(self, params):
        return {"max_num_batched_tokens": 2, "max_seq_length": 3}  # room for the sampled token

    def generate_args(self, params):
        logits = torch.randn(2, 256, dtype=torch.bfloat16)
        logits[:, 7] = 9.0
        return {"logits": logits, "output_tokens": Out(torch.empty(2, dtype=torch.int64), meta=True)}

    def build(self, pk, t, params):
        self.pk = pk
        assert pk.meta_tensors["output_tokens"] is pk.tensor("output_tokens")
        values = pk.new_tensor((2, 2), torch.float32, "values")
        indices = pk.new_tensor((2, 2), torch.int64, "indices")
        pk.argmax_partial_layer(input=t.logits, values=values, indices=indices, grid_dim=(2, 1, 1), block_dim=pk.block_dim)
        pk.argmax_reduce_layer(values=values, indices=indices, output=t.output_tokens, grid_dim=(1, 1, 1),
                               block_dim=pk.block_dim)

    def compute_golden(self, args, params):
        # The second END_OF_TASK_GRAPH appended the request's sampled token (its last row's) to its
        # prompt: prepare_next_batch read what the layer wrote.
        assert self.pk.meta_tensors["tokens"][0, 2].item() == 7
        return args.logits.float().argmax(dim=-1)
"""


def test_an_output_named_after_a_meta_tensor_is_that_meta_tensor(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_scene=SCENE)
    result = pytester.runpytest_inprocess("-rA")
    result.assert_outcomes(passed=1)


def test_only_a_meta_tensor_can_be_a_meta_output(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_scene=SCENE.replace('"output_tokens": Out(', '"sampled": Out(').replace("t.output_tokens", "t.sampled")
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    message = (
        "SceneError: TestSample.generate_args: Out(..., meta=True) stands for the meta tensor of its name, "
        "but ['sampled'] is not one;"
    )
    result.stdout.fnmatch_lines([f"*{glob.escape(message)}*"])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"output_tokens": Out(torch.empty(2, dtype=torch.int64), meta=True)',
            '"output_tokens": Out(torch.empty(2, dtype=torch.int64)), "step": Out(torch.zeros(1, dtype=torch.int32), meta=True)',
            "Out('step', meta=True): the launch reads 'step' as given (the requests, their history, the free-page order), "
            "and an Out starts as poison; pass InOut(..., meta=True) with its values",
        ),
        (
            '"output_tokens": Out(torch.empty(2, dtype=torch.int64), meta=True)',
            '"output_tokens": Out(torch.empty(2, dtype=torch.int64)), '
            '"qo_indptr_buffer": InOut(torch.tensor([0, 4], dtype=torch.int32), meta=True)',
            "InOut('qo_indptr_buffer', meta=True): prepare_next_batch fills 'qo_indptr_buffer' before any task runs, so "
            "the values given would be replaced unseen; pass Out(..., meta=True)",
        ),
    ],
    ids=["out_of_a_launch_input", "inout_of_a_planned_buffer"],
)
def test_a_meta_output_must_be_one_the_run_can_take_so(pytester: pytest.Pytester, old, new, message) -> None:
    """An Out(meta=True) of step (or tokens, the page order, ...) had started the launch from poison,
    and the runtime's error quoted -2147483648; an InOut of a planned buffer was replaced unseen."""
    scene = SCENE.replace(old, new).replace("import Case, Out,", "import Case, InOut, Out,")
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*SceneError: TestSample.generate_args: {glob.escape(message)}*"])


def test_kernel_params_may_not_override_a_planned_buffer(pytester: pytest.Pytester) -> None:
    scene = SCENE.replace(
        '"max_seq_length": 3}',
        '"max_seq_length": 3, "meta_tensors": {"num_new_tokens": torch.tensor([1], dtype=torch.int32)}}',
    )
    pytester.makepyfile(test_scene=scene)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    message = (
        "TestSample.kernel_params: meta_tensors['num_new_tokens'] is filled by prepare_next_batch before the graph runs, "
        "so the values given would be replaced unseen; leave it out (compute_golden reads what the run used in args.meta)"
    )
    result.stdout.fnmatch_lines([f"*{glob.escape(message)}*"])
