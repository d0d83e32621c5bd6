"""Character-level tokenizer of the embedded tiny model.

One token per character of :data:`CHARSET` (printable ASCII and the newline) plus four special tokens, built
with ``tokenizers`` (``WordLevel`` over single characters) and wrapped in ``PreTrainedTokenizerFast``.
Encoding prepends ``<s>`` (BOS) when ``add_special_tokens=True`` (the default, as samplers tokenize prompts);
decoding concatenates characters, so ``decode(encode(text), skip_special_tokens=True) == text`` for any
text over the charset. Saved beside a Llama model folder, ``AutoTokenizer.from_pretrained`` restores it
exactly (a Qwen2 folder would load ``Qwen2Tokenizer``, which drops spaces).
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

if TYPE_CHECKING:
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
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *charset))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers' constructor is unannotated
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        padding_side="right",
    )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""The files of a saved :func:`build_char_tokenizer` (what transformers writes for it)."""
_LEAN_CONFIG_KEYS = frozenset(
    {"backend", "bos_token", "eos_token", "pad_token", "unk_token", "clean_up_tokenization_spaces",
     "model_max_length", "padding_side", "tokenizer_class", "is_local", "local_files_only"}
)  # fmt: skip


def lean_tokenizer_reason(folder: Path) -> str | None:
    """Why :class:`LeanTokenizer` would not reproduce ``AutoTokenizer`` on ``folder`` (None: it does)."""
    if not all((folder / name).is_file() for name in TOKENIZER_FILES):
        return "no tokenizer.json / tokenizer_config.json"
    if any(folder.glob("chat_template*")) or (folder / "special_tokens_map.json").is_file():
        return "a chat template or special-tokens map"
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if not set(cfg) <= _LEAN_CONFIG_KEYS:
        return f"tokenizer_config.json keys {sorted(set(cfg) - _LEAN_CONFIG_KEYS)}"
    if cfg.get("tokenizer_class") not in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return f"tokenizer_class {cfg.get('tokenizer_class')!r}"
    if cfg.get("clean_up_tokenization_spaces", False) or cfg.get("backend", "tokenizers") != "tokenizers":
        return "clean_up_tokenization_spaces or a non-tokenizers backend"
    return None


class LeanTokenizer:
    """A saved fast tokenizer without transformers: encode, decode, special-token ids, save.

    The subset of ``PreTrainedTokenizerFast`` the pipeline calls (``tokenizer(text, add_special_tokens=)
    ["input_ids"]``, ``encode``, ``convert_tokens_to_ids``, ``decode(ids, skip_special_tokens=)``, ``bos_token``, ``eos_token_id``, ``pad_token_id``,
    ``len()``, ``save_pretrained``), backed by the same ``tokenizers`` object, for folders
    :func:`lean_tokenizer_reason` accepts (no chat template, no clean-up). ``save_pretrained`` writes the files
    it was loaded from as transformers writes them back (``tokenizer.json`` unchanged; ``tokenizer_config.json``
    with transformers' load-time keys ``is_local`` and ``local_files_only``).
    """

    chat_template = None

    def __init__(self, folder: Path | str) -> None:
        folder = Path(folder)
        reason = lean_tokenizer_reason(folder)
        if reason is not None:
            raise ValueError(f"{folder}: not a tokenizer the lean loader reproduces ({reason})")
        self.files = {name: (folder / name).read_bytes() for name in TOKENIZER_FILES}
        self.backend = Tokenizer.from_str(self.files["tokenizer.json"].decode("utf-8"))
        cfg = json.loads(self.files["tokenizer_config.json"])
        self.bos_token, self.eos_token = cfg.get("bos_token"), cfg.get("eos_token")
        self.pad_token, self.unk_token = cfg.get("pad_token"), cfg.get("unk_token")
        self.bos_token_id, self.eos_token_id, self.pad_token_id, self.unk_token_id = (
            None if tok is None else self.backend.token_to_id(tok)
            for tok in (self.bos_token, self.eos_token, self.pad_token, self.unk_token)
        )

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.backend.encode(text, add_special_tokens=add_special_tokens).ids}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self(text, add_special_tokens=add_special_tokens)["input_ids"]

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Id of a token (``unk_token_id`` for an unknown one), or the ids of a list of tokens."""
        if isinstance(tokens, str):
            tid = self.backend.token_to_id(tokens)
            return self.unk_token_id if tid is None else tid  # type: ignore[return-value]  # None: no unk
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]  # an int per str token

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        text: str = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def __len__(self) -> int:
        size: int = self.backend.get_vocab_size(with_added_tokens=True)
        return size

    def save_pretrained(self, out_dir: Path | str) -> Any:
        from huggingface_hub.constants import is_offline_mode

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_bytes(self.files["tokenizer.json"])
        cfg = json.loads(self.files["tokenizer_config.json"])
        cfg.update(is_local=True, local_files_only=is_offline_mode())
        text = json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        (out / "tokenizer_config.json").write_text(text, encoding="utf-8")
        return tuple(str(out / name) for name in TOKENIZER_FILES)
