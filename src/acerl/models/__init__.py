"""Base models: the embedded tiny model's tokenizer (:mod:`.tokenizer`), architecture (:mod:`.tiny`) and SFT
(:mod:`.sft`)."""
