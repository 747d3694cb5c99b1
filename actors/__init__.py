"""Long-lived Ray actors: thin stateful shells (resources, batching, restarts, metrics) around
``chessrl`` logic. The EnginePool, ParameterServer, RewardServer and collectors live here."""
