"""One module per phase, each a Ray job graph with ``main(argv)``:
``python -m pipelines.<phase>`` and ``chess-rl <phase>`` run the same code."""
