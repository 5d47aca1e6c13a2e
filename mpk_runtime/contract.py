"""Constants the Python side shares with csrc/runtime/abi.h: limits of a task descriptor, status
and error codes, profiler record kinds, and the meta tensors in the order of ``MpkMeta``.

abi.h is the C++ source of these numbers; a built module reports its values (``mpk_abi_layout``)
and the loader compares them with this file, so the two sides can never drift silently.
"""

from __future__ import annotations

ABI_VERSION = 5

MAX_INPUTS = 7  # tensor slices per task descriptor
MAX_OUTPUTS = 3
MAX_SCALARS = 2  # 32-bit scalars per descriptor (TaskDesc::scalar_f / scalar_i)
MAX_SCHEDULERS = 32
MAX_GRID = 65535  # grid indices travel as uint16 in the descriptor

NO_EVENT = 0xFFFFFFFF
NO_RANK = 0xFFFFFFFF  # MpkWorkerStatus::peer of a wait that is not for another rank
MAX_RANKS = 32  # ranks of one kernel: one lane of a warp watches each (runtime/comm.cuh)

STATUS_OK = 0
STATUS_RUNNING = 1
STATUS_WATCHDOG = 2
STATUS_PAGES_EXHAUSTED = 3
STATUS_SKIPPED = 4
STATUS_TASK_ERROR = 5

TASK_ERROR_INDEX = 1  # Runtime::fail: an index read from data is out of range
TASK_ERROR_VALUE = 2  # Runtime::fail: a value read from data is one the task cannot use (value: its index)

PROF_TASK_BEGIN = 1
PROF_TASK_END = 2
PROF_PREPARE_BEGIN = 3
PROF_PREPARE_END = 4
PROF_TASK_MARK = 5

# name in C (MpkMeta field) -> the meta tensor's name in Python, in MpkMeta's order.
META_FIELDS: dict[str, str] = {
    "tokens": "tokens",
    "step": "step",
    "prompt_lengths": "prompt_lengths",
    "stop_lengths": "stop_lengths",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "num_new_tokens": "num_new_tokens",
    "qo_indptr": "qo_indptr_buffer",
    "paged_kv_indptr": "paged_kv_indptr_buffer",
    "paged_kv_indices": "paged_kv_indices_buffer",
    "paged_kv_last_page_len": "paged_kv_last_page_len_buffer",
}
META_TENSORS: tuple[str, ...] = tuple(META_FIELDS.values())
# What a launch starts from, read as given: the requests, their history and the free-page order.
META_LAUNCH_INPUTS = ("tokens", "step", "prompt_lengths", "stop_lengths", "paged_kv_indices_buffer")
# Filled by prepare_next_batch before the first iteration: values given are replaced.
META_PLANNED = ("input_tokens", "num_new_tokens", "qo_indptr_buffer", "paged_kv_indptr_buffer", "paged_kv_last_page_len_buffer")

# What the module must report for each constant (``mpk_abi_layout``'s "Constants" entry).
CHECKED = {
    "MPK_ABI_VERSION": ABI_VERSION,
    "MPK_MAX_INPUTS": MAX_INPUTS,
    "MPK_MAX_OUTPUTS": MAX_OUTPUTS,
    "MPK_MAX_SCHEDULERS": MAX_SCHEDULERS,
    "MPK_NO_EVENT": NO_EVENT,
    "MPK_NO_RANK": NO_RANK,
    "MPK_STATUS_OK": STATUS_OK,
    "MPK_STATUS_RUNNING": STATUS_RUNNING,
    "MPK_STATUS_WATCHDOG": STATUS_WATCHDOG,
    "MPK_STATUS_PAGES_EXHAUSTED": STATUS_PAGES_EXHAUSTED,
    "MPK_STATUS_SKIPPED": STATUS_SKIPPED,
    "MPK_STATUS_TASK_ERROR": STATUS_TASK_ERROR,
    "MPK_TASK_ERROR_INDEX": TASK_ERROR_INDEX,
    "MPK_TASK_ERROR_VALUE": TASK_ERROR_VALUE,
    "MPK_PROF_TASK_BEGIN": PROF_TASK_BEGIN,
    "MPK_PROF_TASK_END": PROF_TASK_END,
    "MPK_PROF_PREPARE_BEGIN": PROF_PREPARE_BEGIN,
    "MPK_PROF_PREPARE_END": PROF_PREPARE_END,
    "MPK_PROF_TASK_MARK": PROF_TASK_MARK,
}

# The longest watchdog_timeout a kernel takes, in seconds (frontend/params.py; the plugin's
# --mpk-hang-timeout and the sanitizer's slowed-down child are held to it too).
WATCHDOG_MAX_S = 3600
