"""The LM settings of a program: which LM each LLM step uses and how it is asked (``runtime.lm``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LM_STEPS: tuple[str, ...] = ("target_type", "cypher", "rerank")


class LMConfig(BaseModel):
    """Which LM each LLM step uses (a DSPy/LiteLLM model string, or ``local`` for the offline GGUF),
    and how long to wait for it.

    ``timeout_s`` and ``num_retries`` left at None come from ``AUTOFOCUS_LM_TIMEOUT`` and
    ``AUTOFOCUS_LM_RETRIES``, else from ``autofocus.lm``'s defaults (``get_lm``).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not silently dropped

    default: str = Field(
        "local", description="the LM of every step that names none below: a DSPy/LiteLLM model string "
        "(openai/gpt-4o-mini, hosted_vllm/..., ollama_chat/...) or local / local-small / local:FILE.gguf"
    )
    target_type: str | None = Field(None, description="step 1's LM (None: default); a cheaper LM often suffices")
    cypher: str | None = Field(
        None, description="step 2's LM, which writes the query (None: default); the step a stronger LM helps most"
    )
    rerank: str | None = Field(None, description="step 8's LM (None: default)")
    temperature: float = Field(0.0, description="sampling temperature of every step (0: repeatable answers, cached)")
    max_tokens: int = Field(512, description="longest answer of one LM call; raise it if long queries are cut off")
    timeout_s: float | None = Field(
        None, gt=0, description="seconds to wait for one LM answer (None: AUTOFOCUS_LM_TIMEOUT, else 120 hosted, 900 local)"
    )
    num_retries: int | None = Field(
        None, ge=0, description="retries of a timed-out or failed LM request (None: AUTOFOCUS_LM_RETRIES, else 2)"
    )
    prompt_layout: Literal["server", "chat"] = Field(
        "server", description="the offline LM's prompts (llama-server): server = ChatAdapter's text laid out for "
        "its prompt cache (format reminder before the inputs, the answer's fixed start given, not generated); "
        "chat = ChatAdapter's own layout, all generated (other LMs always get chat)"
    )
    forced_tokens: Literal["skip", "generate"] = Field(
        "skip", description="the offline LM's greedy answers under a grammar (step 2's query): skip = the tokens "
        "the grammar forces are appended, not generated (decoded by llguidance beside llama-server); generate = "
        "llama-server decodes every token"
    )

    def for_step(self, step: str) -> str:
        if step not in LM_STEPS:
            raise ValueError(f"unknown LLM step {step!r}; steps: {', '.join(LM_STEPS)}")
        return getattr(self, step) or self.default

    def client_options(self) -> dict[str, Any]:
        """The keyword arguments ``autofocus.lm.get_lm`` takes from this config."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "timeout": self.timeout_s,
                "num_retries": self.num_retries,
                "local": {"prompt_layout": self.prompt_layout, "forced_tokens": self.forced_tokens}}
