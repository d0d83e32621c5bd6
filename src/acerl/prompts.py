"""Prompt templates: the one home for turning a problem into model input.

Training rollouts, evaluation sampling and diagnostics all call :func:`build_prompt`, so a model sees the
same prompt in every stage. Templates are registered by name; the config picks one per model.

- ``plain``: ``"Problem: {problem}\\nSolution:"`` for the embedded tiny model (no chat template).
- ``qwen_boxed``: chat template with Qwen2.5-Math's system prompt asking for ``\\boxed{}``.
- ``qwen3_boxed_nothink``: same instruction, chat template with ``enable_thinking=False`` (the paper
  evaluates Qwen3-8B-Base with thinking disabled).
- ``llama_boxed``: the instruction as the user turn of the tokenizer's own chat template.
- ``dapo_answer``: DAPO-Math-17K's own ``Answer:`` instruction wrapper, as a single user turn.

The paper does not state its templates; docs/deviations.md records the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

PromptFn = Callable[[str, Any], str]
_TEMPLATES: dict[str, PromptFn] = {}


def register_template(name: str) -> Callable[[PromptFn], PromptFn]:
    def deco(fn: PromptFn) -> PromptFn:
        if name in _TEMPLATES:
            raise ValueError(f"prompt template {name!r} is already registered")
        _TEMPLATES[name] = fn
        return fn

    return deco


def template_names() -> list[str]:
    return sorted(_TEMPLATES)


def _chat(tokenizer: Any, messages: list[dict[str, str]], **kwargs: Any) -> str:
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "this prompt template needs a tokenizer that carries a chat template "
            "(tokenizer.chat_template is missing); use template 'plain' for models without one"
        )
    text: str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return text


@register_template("plain")
def _plain(problem: str, tokenizer: Any = None) -> str:
    return f"Problem: {problem}\nSolution:"


@register_template("qwen_boxed")
def _qwen_boxed(problem: str, tokenizer: Any = None) -> str:
    return _chat(
        tokenizer, [{"role": "system", "content": BOXED_INSTRUCTION}, {"role": "user", "content": problem}]
    )


@register_template("qwen3_boxed_nothink")
def _qwen3_boxed_nothink(problem: str, tokenizer: Any = None) -> str:
    return _chat(
        tokenizer,
        [{"role": "user", "content": f"{problem}\n{BOXED_INSTRUCTION}"}],
        enable_thinking=False,
    )


@register_template("llama_boxed")
def _llama_boxed(problem: str, tokenizer: Any = None) -> str:
    return _chat(tokenizer, [{"role": "user", "content": f"{problem}\n{BOXED_INSTRUCTION}"}])


@register_template("dapo_answer")
def _dapo_answer(problem: str, tokenizer: Any = None) -> str:
    return _chat(tokenizer, [{"role": "user", "content": DAPO_PREFIX + problem + DAPO_SUFFIX}])


def build_prompt(problem: str, template: str, tokenizer: Any = None) -> str:
    """Render ``problem`` with the named template (``tokenizer`` is needed by chat templates)."""
    try:
        fn = _TEMPLATES[template]
    except KeyError:
        raise ValueError(
            f"unknown prompt template {template!r}; valid: {', '.join(template_names())}"
        ) from None
    return fn(problem, tokenizer)
