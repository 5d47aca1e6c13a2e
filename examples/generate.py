"""Greedy decoding of a batch of prompts with a whole Qwen3 model in one megakernel; prints the
generated token ids and tokens/s.

    python examples/generate.py                                   # random Qwen3-0.6B-shaped weights, on the GPU
    python examples/generate.py --model tiny --emulate            # a tiny random model on the CPU emulator
    python examples/generate.py --checkpoint DIR                  # config.json + *.safetensors (or a .pt state_dict)
    python examples/generate.py --prompt 9707,11,1879 --prompt 785,6722 --new-tokens 64

Prompts are token ids (no tokenizer needed); without --prompt, --batch random prompts of
different lengths are drawn.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mpk_runtime.models import PRESETS, Qwen3Config, Qwen3Generator, random_state_dict


def load_checkpoint(path: Path) -> tuple[Qwen3Config, dict[str, torch.Tensor]]:
    """A Hugging Face model directory (config.json and *.safetensors) or a torch.save'd state_dict
    (.pt, with config.json beside it)."""
    if not path.exists():
        raise SystemExit(f"--checkpoint {path}: no such file or directory")
    directory = path if path.is_dir() else path.parent
    if path.is_file() and path.suffix != ".pt":
        raise SystemExit(f"--checkpoint {path}: give a model directory or a .pt state_dict file")
    if not (directory / "config.json").is_file():
        raise SystemExit(f"--checkpoint {path}: {directory / 'config.json'} not found; a checkpoint needs its HF config.json")
    config = Qwen3Config.from_hf(json.loads((directory / "config.json").read_text()))
    if path.is_dir():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise SystemExit(f"--checkpoint {path}: *.safetensors need the package: pip install safetensors") from None

        state_dict: dict[str, torch.Tensor] = {}
        for f in sorted(path.glob("*.safetensors")):
            state_dict.update(load_file(f))
        if not state_dict:
            raise SystemExit(f"--checkpoint {path}: the directory holds no *.safetensors weights")
    else:
        state_dict = torch.load(path, map_location="cpu")
    return config, {k: v.to(config.dtype) for k, v in state_dict.items()}


def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be at least 1")
    return n


def token_ids(text: str) -> list[int]:
    """An argparse type: comma-separated token ids."""
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated token ids, e.g. 9707,11,1879") from None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, help="a HF model directory or a .pt state_dict (else random weights)")
    parser.add_argument("--model", choices=sorted(PRESETS), help="shape of the random model (default: qwen3-0.6b)")
    parser.add_argument("--layers", type=positive, help="override the number of layers of the random model")
    parser.add_argument("--prompt", action="append", type=token_ids, help="comma-separated token ids (repeatable)")
    parser.add_argument("--batch", type=positive, default=4, help="random prompts to draw when no --prompt is given")
    parser.add_argument("--new-tokens", type=positive, default=32, help="tokens to generate per prompt, at least")
    parser.add_argument("--emulate", action="store_true", help="run on the CPU emulator (nvcc builds for sm90)")
    args = parser.parse_args()

    if args.checkpoint:
        if args.layers or args.model:
            parser.error("--layers and --model shape the random model; a --checkpoint brings its own config")
        config, state_dict = load_checkpoint(args.checkpoint)
    else:
        shape = dict(PRESETS[args.model or "qwen3-0.6b"])
        if args.layers:
            shape["num_hidden_layers"] = args.layers
        config = Qwen3Config(**shape)
        state_dict = random_state_dict(config, seed=0)
    if args.prompt:
        prompts = args.prompt
    else:
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, config.vocab_size, (4 + 3 * i,), generator=g).tolist() for i in range(args.batch)]

    init = dict(emulate=True, target_cc=90, num_workers=8) if args.emulate else {}
    gen = Qwen3Generator(config, state_dict, prompts, args.new_tokens, **init)
    gen.compile()
    gen.generate()  # a first launch warms up (module load, caches); the second is timed
    tokens = gen.generate()
    gen.finalize()
    for p, t in zip(prompts, tokens):
        print(f"prompt {p} -> {t}")
    total = sum(len(t) for t in tokens)
    print(
        f"{total} tokens in {gen.seconds * 1e3:.1f} ms: {total / gen.seconds:.0f} tokens/s "
        f"({len(prompts)} requests, {config.num_hidden_layers} layers, {gen.pk.backend})"
    )


if __name__ == "__main__":
    main()
