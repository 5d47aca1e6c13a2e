"""A checkpoint's state_dict checked against a ``Qwen3Config``, in the Hugging Face Qwen3 /
Qwen3-MoE parameter names, so that one can be passed as it is. Every problem is raised before
anything is attached to a kernel: WeightError for a missing, unknown or misplaced weight,
ShapeError / DTypeError for a weight of the wrong shape or dtype."""

from __future__ import annotations

import difflib
import re

import torch

from ..errors import DTypeError, ShapeError, WeightError
from .config import Qwen3Config, expected_weights, require_config


def fuse_experts(c: Qwen3Config, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A checkpoint's per-expert weights (``mlp.experts.{e}.gate_proj.weight``, ``up_proj``,
    ``down_proj``) stacked into ``mlp.experts.gate_up_proj`` (E, 2 I, H: each expert's gate rows,
    then its up rows) and ``mlp.experts.down_proj`` (E, H, I); other names pass through."""
    out = dict(state_dict)
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}.mlp.experts."
        if p + "0.gate_proj.weight" not in out:
            continue
        names = {e: [f"{p}{e}.{w}.weight" for w in ("gate_proj", "up_proj", "down_proj")] for e in range(c.num_experts)}
        for e, keys in names.items():
            shapes = [(c.moe_intermediate_size, c.hidden_size)] * 2 + [(c.hidden_size, c.moe_intermediate_size)]
            for key, shape in zip(keys, shapes):
                t = out.get(key)
                if not isinstance(t, torch.Tensor):
                    raise WeightError(
                        f"state_dict has no tensor {key!r}: expert {e} of layer {i} needs its gate, up and down weights"
                    )
                if tuple(t.shape) != shape:
                    raise ShapeError(f"state_dict[{key!r}] has shape {tuple(t.shape)}; this config needs {shape}")
        out[p + "gate_up_proj"] = torch.stack([torch.cat([out[k[0]], out[k[1]]]) for k in names.values()])
        out[p + "down_proj"] = torch.stack([out[k[2]] for k in names.values()])
        for keys in names.values():
            for k in keys:
                del out[k]
    return out


def check_state_dict(c: Qwen3Config, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights of ``state_dict`` the model reads, checked against ``c``. A tied checkpoint's
    ``lm_head.weight`` (the embedding table itself) and rotary buffers are accepted and left out;
    per-expert MoE weights are stacked (``fuse_experts``)."""
    require_config(c, "check_state_dict")
    if not isinstance(state_dict, dict):
        raise WeightError(f"state_dict must be a dict of name -> torch.Tensor, got {type(state_dict).__name__}")
    odd = [k for k in state_dict if not isinstance(k, str)]
    if odd:
        raise WeightError(
            f"state_dict key {odd[0]!r} ({type(odd[0]).__name__}) is not a weight name; keys are Hugging Face names such as "
            f"'model.norm.weight'"
        )
    on: dict[str, str] = {}  # device -> a weight on it: the stacking of experts and of q / k / v needs one device
    for k, v in state_dict.items():
        if isinstance(v, torch.Tensor):
            on.setdefault(str(v.device), k)
    if len(on) > 1:
        shown = ", ".join(f"{k!r} on {d}" for d, k in on.items())
        raise WeightError(f"state_dict holds weights on {len(on)} devices ({shown}); give every weight on one device")
    if c.is_moe:
        state_dict = fuse_experts(c, state_dict)
    want = expected_weights(c)
    ignored = {k for k in state_dict if k.endswith("rotary_emb.inv_freq")}
    if c.tie_word_embeddings and "lm_head.weight" in state_dict:
        _check_tied(state_dict)
        ignored.add("lm_head.weight")  # tied: the same table (HF state_dicts list both names)
    missing = [k for k in want if k not in state_dict]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        hint = ""
        if missing == ["lm_head.weight"]:
            hint = "; for an lm head tied to the embedding set Qwen3Config(tie_word_embeddings=True)"
        else:
            hint = _prefix_hint(missing[0], list(state_dict))
        raise WeightError(
            f"state_dict has no {missing[0]!r}{more}: every Hugging Face Qwen3 weight of this config is needed{hint}"
        )
    extra = sorted(set(state_dict) - set(want) - ignored)
    if extra:
        near = difflib.get_close_matches(extra[0], list(want), n=1)
        layer = re.match(r"model\.layers\.(\d+)\.", extra[0])
        if layer and int(layer.group(1)) >= c.num_hidden_layers:
            hint = f"; the checkpoint has more layers than num_hidden_layers={c.num_hidden_layers}: check the config"
        elif near:
            hint = f"; did you mean {near[0]!r}?"
        else:
            hint = "; check the config (experts, tied embeddings) against the checkpoint"
        raise WeightError(f"state_dict has {len(extra)} weight(s) this config does not use, e.g. {extra[0]!r}{hint}")
    out = {}
    for name, shape in want.items():
        t = state_dict[name]
        if not isinstance(t, torch.Tensor):
            raise WeightError(f"state_dict[{name!r}] must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ShapeError(
                f"state_dict[{name!r}] has shape {tuple(t.shape)}; this config needs {shape}: check the config's sizes"
            )
        if t.dtype != c.dtype:
            raise DTypeError(f"state_dict[{name!r}] is {t.dtype}; the model runs in {c.dtype}: pass t.to({c.dtype})")
        out[name] = t
    return out


def _check_tied(state_dict: dict[str, torch.Tensor]) -> None:
    """A tied checkpoint lists the embedding table under lm_head.weight too: anything else there is
    an lm head of its own, which a tied config would replace by the embedding without a word."""
    head, embed = state_dict["lm_head.weight"], state_dict.get("model.embed_tokens.weight")
    if not isinstance(head, torch.Tensor) or not isinstance(embed, torch.Tensor):
        return  # a missing or odd embedding is named by the checks after this one
    same = head is embed or (
        head.shape == embed.shape and head.dtype == embed.dtype and head.device == embed.device and torch.equal(head, embed)
    )
    if not same:
        raise WeightError(
            "state_dict['lm_head.weight'] is not the embedding table, but Qwen3Config(tie_word_embeddings=True) decodes "
            "with the embedding: this checkpoint has an lm head of its own; set tie_word_embeddings=False"
        )


def _prefix_hint(wanted: str, keys: list[str]) -> str:
    """Where the checkpoint names the weight with a prefix more or less (a DDP ``module.``, a
    compiled ``_orig_mod.``, a bare ``Qwen3Model`` without ``model.``): how to rename them."""
    for key in keys:
        if key.endswith(wanted) and key != wanted:
            extra = key[: -len(wanted)]
            return f"; the checkpoint names it {key!r}: pass {{k.removeprefix({extra!r}): v for k, v in state_dict.items()}}"
        if wanted.endswith(key) and wanted.startswith("model.") and "." in key:
            return f"; the checkpoint names it {key!r}, without 'model.': pass {{'model.' + k: v for k, v in state_dict.items()}}"
    return ""
