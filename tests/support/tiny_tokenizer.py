"""A tiny word-level tokenizer trained offline with ``tokenizers``, saved as a HF tokenizer folder.

vLLM's benchmark client needs a tokenizer to build random prompts of a given length; no model
download is possible here, so the test trains one on a fixed word list (deterministic) and saves
``tokenizer.json`` + ``tokenizer_config.json``, which ``AutoTokenizer`` loads as a fast tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

WORDS = [f"w{index}" for index in range(400)]


def make_tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator([" ".join(WORDS)] * 2, trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
              "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 1000000}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder
