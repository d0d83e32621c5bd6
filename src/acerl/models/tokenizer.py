"""Character-level tokenizer of the embedded tiny model.

One token per character of :data:`CHARSET` (printable ASCII and the newline) plus four special tokens, built
with ``tokenizers`` (``WordLevel`` over single characters) and wrapped in ``PreTrainedTokenizerFast``.
Encoding prepends ``<s>`` (BOS) when ``add_special_tokens=True`` (the default, as samplers tokenize prompts);
decoding concatenates characters, so ``decode(encode(text), skip_special_tokens=True) == text`` for any
text over the charset. Saved beside a Llama model folder, ``AutoTokenizer.from_pretrained`` restores it
exactly (a Qwen2 folder would load ``Qwen2Tokenizer``, which drops spaces).
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3
CHARSET: str = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
"""The 95 printable ASCII characters (space included) and ``\\n``: every character of prompts and solutions."""


def build_char_tokenizer(charset: str = CHARSET, model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: ids 0-3 are ``<pad> <s> </s> <unk>``, then ``charset`` in order.

    Characters outside ``charset`` map to ``<unk>``. ``model_max_length`` should match the model's
    ``max_position_embeddings``.
    """
    if len(set(charset)) != len(charset):
        raise ValueError("charset has repeated characters")
    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *charset))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        padding_side="right",
    )
