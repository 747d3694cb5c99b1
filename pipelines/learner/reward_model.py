"""The reward model as the learners build it: a score head on a GPT-2-style transformer
(:func:`reward_model_from_backbone`). ``reward``'s learner trains it from the sft model; ``ppo``'s
critic starts from it over the policy when Stockfish grades the moves. Not a phase: both import
it from here, so that neither learner imports the other's phase module.

    model, tokenizer = reward_model_from_backbone("runs/demo/sft/model")  # a new score head
    model, tokenizer = reward_model_from_backbone("runs/demo/reward/model")  # loads as it is
"""

from __future__ import annotations

from typing import Any


def reward_model_from_backbone(path: str) -> tuple[Any, Any]:
    """``GPT2ForSequenceClassification`` (one label) from a GPT-2-style checkpoint: a causal LM's
    transformer gets a new score head; a saved reward model loads as it is. Its pad token id is
    the tokenizer's (the model scores the last token that is not padding)."""
    from transformers import GPT2ForSequenceClassification
    from transformers.utils import logging as hf_logging

    from chessrl.lm.checkpoints import checkpoint_folder, load_tokenizer

    with checkpoint_folder(path) as local:
        tokenizer = load_tokenizer(str(local))
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # "score.weight newly initialized": that is the point
        try:
            model = GPT2ForSequenceClassification.from_pretrained(local, num_labels=1)
        finally:
            hf_logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
