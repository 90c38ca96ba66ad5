"""The parts that several systems share: symbol candidates (step 4), grounding (5), VSS and merge (6-7),
rerankers and sorting (8), LM-call safety, and what the LLM steps are told about a schema."""
