"""Optimisation of a system on validation splits: DSPy prompt optimisers for chosen LLM steps
(``prompts``, with ``scoring`` objectives and GEPA ``feedback``), saved as program files (``saved``)
that ``ask``, ``eval`` and ``tune`` load with ``--program``.

Example:
    from autofocus.optimize import examples, optimise, save_program
    from autofocus.options import PromptOptOptions
    result = optimise(kb, cfg, examples(train), examples(val), PromptOptOptions(optimizer="bootstrap", steps=["cypher"]))
    save_program(result.program, result.system, result.config, "cypher.json", result.metadata)
"""

from autofocus.optimize.prompts import OPTIMIZERS, OptimizeResult, examples, llm_steps, optimise
from autofocus.program.saved import ProgramFileError, load_program_state, read_program_config, save_program

__all__ = [
    "OPTIMIZERS",
    "OptimizeResult",
    "ProgramFileError",
    "examples",
    "llm_steps",
    "load_program_state",
    "optimise",
    "read_program_config",
    "save_program",
]
