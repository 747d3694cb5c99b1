"""What every phase shares:

- ``phase``: :class:`~pipelines.common.phase.Phase` and ``Phase.main`` (the parser, the config,
  the storage, the inputs, tracking, the manifest and the exit codes of every phase's command);
- ``artifacts``: a phase's outputs as other phases find them (saved models, their records);
- ``config_record``: the record of its config a phase keeps in its folder;
- ``batch_size``: ``batch_size: auto``, measured on the device a phase trains on.
"""
