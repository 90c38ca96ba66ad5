"""One module per system, composed from ``program.steps``: AF-Retriever, FocusedRetriever, 4StepFocus,
HybGRAG, the STaRK baselines, and the registry of named presets."""
