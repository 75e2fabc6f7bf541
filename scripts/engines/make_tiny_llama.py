"""Writes a tiny random-weight Llama in Hugging Face format, with a byte-level BPE tokenizer
trained offline, for the real-engine tests (vLLM and SGLang on CPU).

Why: the tests need the real engines' real code paths (model loader, scheduler, prefix cache,
metrics) on a 2-core CPU machine with no model hub. Random weights give nonsense text and the
same code path as a real Llama; 2 layers of width 256 make a token cost milliseconds.

Nothing is downloaded: the tokenizer is trained on the Python standard library's own sources.
The output is deterministic for a given seed and library versions.

Usage: python make_tiny_llama.py OUT_DIR
"""

import pathlib
import sys
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 32000
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus():
    """The standard library's Python sources: plenty of text, always present, no download."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py"))[:400]
    for p in files:
        try:
            yield p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue


def tokenizer(out: pathlib.Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_llama.py OUT_DIR")
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # safetensors writes 0600: an agent running as root starts engines as its engine user.
    for f in out.iterdir():
        f.chmod(0o644)
    print(f"tiny llama written to {out} (vocab {len(tok)})")


if __name__ == "__main__":
    main()
