"""The chess language model: what it reads, what it is, and how it plays legal moves.

- :mod:`~chessrl.lm.tokenizer`: one token per UCI move, characters for FEN, task markers.
- :mod:`~chessrl.lm.formats`: the text formats a model is trained on.
- :mod:`~chessrl.lm.models`: presets built from config, legal play through any tokenizer.
- :mod:`~chessrl.lm.checkpoints`: saved models read back from a folder or S3, each failure one line.
- :mod:`~chessrl.lm.gelu`: GPT-2's GELU as one kernel (imported by models and checkpoints; imports neither).
- :mod:`~chessrl.lm.masked`: the policy restricted to the legal moves of a position.
- :mod:`~chessrl.lm.shared_prefix`: scoring rows that begin alike, each shared beginning read once.
- :mod:`~chessrl.lm.legality`: the legal-move loss.
- :mod:`~chessrl.lm.lm_data`: the held-out split, training text, block packing.
- :mod:`~chessrl.lm.lm_eval`: the sft phase's language-model metrics.
- :mod:`~chessrl.lm.batch_size`: automatic batch size from a probed training step.

Imports: :mod:`chessrl.data` only.
"""
