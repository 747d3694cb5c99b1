"""The commands, one module each, each a Ray job graph with ``main(argv)``: ``python -m
pipelines.<command>`` and ``chess-rl <command>`` run the same code. Eleven are phases (each defines
``PHASE``: a folder of outputs, a manifest, a config section); ``rlaif`` runs them as one graph and
``uci`` plays a saved model over UCI. A command's helpers sit beside it, named ``<command>_<what>``:

==============  =================================================================
command         its helpers
==============  =================================================================
``prepare``
``annotate``    ``annotate_sources`` (where the positions come from)
``sft``         ``sft_data`` (the training texts)
``preferences``
``reward``
``dpo``
``ppo``         ``ppo_inputs`` (the input checks), ``ppo_report`` (the summary), ``ppo_select`` (the policy kept)
``grpo``        ``grpo_report`` (the summary)
``selfplay``    ``selfplay_gate`` (the arena gate)
``evaluate``    ``evaluate_matches``, ``evaluate_openings``, ``evaluate_opponents``
``tune``
``rlaif``       ``rlaif_graph`` (the graph's nodes)
``uci``
==============  =================================================================

Beside them: ``cli`` (the ``chess-rl`` command), ``common/`` (what every phase shares: ``phase``,
``artifacts``, ``config_record``, ``batch_size``), ``config/`` (the config sections) and
``learner/`` (the Ray Train learners the phases start), and ``reward_inputs`` beside ``reward``.

Importing the package sets ``OMP_WAIT_POLICY=PASSIVE`` unless it is set (before torch is
imported, which reads it once; :data:`cluster.runtime.EMBEDDED_WORKER_ENV` gives Ray's workers
the same): torch's OpenMP threads then sleep between parallel regions instead of spinning, and
a 2-thread forward pass of a judge over one position's 37 moves, on 2 cores beside another
torch process, took 65-92 ms instead of 815-1141 ms (82 against 208 ms beside a busy shell loop),
at a cost when the machine is otherwise idle: 72 against 54-60 ms. A phase shares its cores with
Ray's actors and Stockfish, and CI's tests with one another.
"""

import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
