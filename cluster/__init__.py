"""Ray, storage, tracking and config plumbing. Knows nothing about chess.

Modules:
    errors    -- the user-facing error tree (``UserError`` and friends)
    config    -- YAML preset -> typed pydantic config -> command-line overrides
    storage   -- one API for local paths, ``file://`` and ``s3://`` (pyarrow.fs), atomic writes
    tracking  -- MLflow: a parent run per invocation, a child run per phase
    runtime   -- join a Ray cluster or start an embedded local one
    capacity  -- what the cluster can hold (alive nodes, its autoscaler's node types); ask for nodes
"""
