"""A Hugging Face model directory as a trainer writes one, for the tests and the bench.

A small Llama (transformers' own ``LlamaConfig`` and ``save_pretrained``), a byte-level
BPE tokenizer trained with ``tokenizers`` and saved with ``PreTrainedTokenizerFast``
(``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``, a chat
template), and ``generation_config.json``. Generation 2 is generation 1 after one Adam
step on fp32 master weights, saved in bf16 as RL trainers do, with a changed sampling
temperature; its tokenizer and config are unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import import_torch

CORPUS = [
    "the standby takes over when the primary fails",
    "weights move as deltas between generations of a model",
    "a hot standby serves the new generation without a restart",
    "tokenizers split text into pieces the model has seen",
] * 8
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)
PROMPT = "the hot standby serves the new generation"


def _corpus(vocab: int) -> list[str]:
    """The tests' sentences, and for a large vocabulary enough made-up words to learn it."""
    if vocab <= 320:
        return CORPUS
    import random  # noqa: PLC0415

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(vocab)]
    return CORPUS + [" ".join(words[i : i + 16]) for i in range(0, len(words), 16)]


def _tokenizer(directory: Path, vocab: int = 320) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(vocab), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def build(
    root: Path,
    *,
    shard: str | None = None,
    hidden: int = 64,
    layers: int = 2,
    vocab: int = 320,
    lr: float = 2e-4,
) -> dict[int, Path]:
    """Generations 1 and 2 of a small model as ``root/g1`` and ``root/g2``; ``shard`` (a
    size such as "100KB") saves sharded weights with an index. The bench builds larger
    ones (``hidden``, ``layers``, a tokenizer of ``vocab`` tokens, a smaller step ``lr``)."""
    torch = import_torch()
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    torch.manual_seed(0)
    out = {g: root / f"g{g}" for g in (1, 2)}
    tok = _tokenizer(out[1], vocab)
    tok.save_pretrained(out[2])  # unchanged: the same bytes in both generations
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    master = LlamaForCausalLM(config)  # fp32 master weights
    saved = {"max_shard_size": shard} if shard else {}
    for g in (1, 2):
        if g == 2:
            _one_step(torch, master, tok, lr)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        model.load_state_dict({k: v.to(torch.bfloat16) for k, v in master.state_dict().items()})
        model.generation_config = GenerationConfig(
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            do_sample=True,
            temperature=0.7 if g == 1 else 0.6,
        )
        model.save_pretrained(out[g], **saved)
    return out


def _one_step(torch: Any, model: Any, tok: Any, lr: float) -> None:
    """One Adam step on the corpus, as a fine-tuning or RL step moves fp32 masters."""
    ids = [tok(text)["input_ids"][:16] for text in CORPUS[:4]]
    batch = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(x) for x in ids], batch_first=True, padding_value=0
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def logits(directory: Path) -> Any:
    """Load ``directory`` as engines do (AutoConfig, AutoTokenizer,
    AutoModelForCausalLM.from_pretrained) and return the logits of ``PROMPT``."""
    torch = import_torch()
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    AutoConfig.from_pretrained(directory)
    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    model.eval()
    with torch.no_grad():
        return model(**tok(PROMPT, return_tensors="pt")).logits


def chat_prompt(directory: Path) -> str:
    from transformers import AutoTokenizer  # noqa: PLC0415

    tok = AutoTokenizer.from_pretrained(directory)
    text: str = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    return text


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
