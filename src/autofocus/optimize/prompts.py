"""DSPy prompt optimisation of chosen LLM steps of a system, the other steps left zero-shot.

A system's LLM steps are its top-level sub-modules holding predictors, named as the registry names
them (``target_type``, ``cypher``, ``query_graph``, ``triplets``, ``reranker``, ``router``,
``validator``, ``commenter``). The optimiser is given a ``StepProgram`` whose only parameters are
the chosen steps: each call puts them into a full program (one per thread, never copied) and runs
it, so the non-chosen predictors are invisible to the optimiser and cannot change, and the
optimiser's many deep copies copy prompts, not the knowledge base.

Optimisers (DSPy 3.4): ``bootstrap`` (BootstrapFewShot: demos from the training questions whose
run scored > 0, or full marks with ``grounded_f1``), ``bootstrap-rs``
(BootstrapFewShotWithRandomSearch over ``trials`` demo sets, selected on the validation split),
``mipro`` (MIPROv2: instructions + demos, ``auto="light"`` unless ``trials`` is given) and ``gepa``
(GEPA: instructions from a reflection LM reading ``autofocus.optimize.feedback``; ``budget`` metric
calls, else ``auto="light"``). Labelled QA files have no gold intermediate outputs (no gold Cypher), so their demos are bootstrapped.
Synthetic questions (``autofocus synth``) carry the gold target type and Cypher of the pattern
behind them: ``gold`` (LabeledFewShot) shows those as the demos, one per pattern shape in turn;
``knn`` keeps them all as a pool and shows each question its ``max_demos`` nearest ones
(``program.steps.nearest_demos``: per question, not one fixed set; no LM call to make them).

A system that collects in-context examples on first use (HybGRAG's critic examples) collects them
before optimising: they stay in the steps not chosen and are saved with the program.

Demos keep only the inputs that change between questions: the schema inputs every call repeats
(KB description, labels, relationship types, attributes, candidate types) are left out of them
unless ``full_demos``, which keeps prompts short for small local models.

Example:
    result = optimise(kb, cfg, train, val, PromptOptOptions(optimizer="bootstrap", steps=["cypher"]))
    save_program(result.program, "afr", result.config, "cypher.json", result.metadata)
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dspy

from autofocus.config import AutofocusConfig
from autofocus.metrics import Candidates
from autofocus.optimize.feedback import feedback_metric
from autofocus.optimize.scoring import REPORTED, check_metric, default_metric, needs_final_order, objective
from autofocus.optimize.scoring import question_scores as _question_scores
from autofocus.optimize.yes_no_demos import yes_no_demos
from autofocus.options import PromptOptOptions
from autofocus.program.saved import program_state
from autofocus.program.steps.nearest_demos import NearestDemos, PoolQuestion
from autofocus.skb.qa import OPTIONAL_COLUMNS
from autofocus.trace import Trace
from autofocus.usage import UsageCallback

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike
    from autofocus.skb.model import SKB

OPTIMIZERS: tuple[str, ...] = ("bootstrap", "bootstrap-rs", "mipro", "gepa", "gold", "knn")
GOLD_STEPS = ("target_type", "cypher")  # steps whose gold output synthetic questions carry, under the step's name
# step 8's gold demos come from any question's answers and the graph (``yes_no_demos``), for the yes/no judge
GOLD_JUDGE = "reranker"
DEFAULT_RS_CANDIDATES = 4
# DSPy keeps any trace whose metric is truthy as a demo, so with a graded metric a query that grounds one
# right node among twenty wrong ones would be shown to the LM as an example of the task. Where the gold
# set is exact (synthetic questions, `grounded_f1`), a demo must score full marks; labelled gold sets are
# often incomplete or larger than the slots, so their metrics keep DSPy's rule.
DEMO_THRESHOLDS = {"grounded_f1": 1.0 - 1e-9}


def examples(items: Iterable[Any]) -> list[dspy.Example]:
    """QA items (``autofocus.skb.qa.QAItem``) as DSPy examples: input ``question``, label ``answer_ids``
    (and for synthetic questions ``shape`` and the gold ``target_type`` and ``cypher``)."""
    out = []
    for it in items:
        extra = {k: v for k in OPTIONAL_COLUMNS if (v := getattr(it, k, None))}
        out.append(dspy.Example(question=it.query, answer_ids=[int(a) for a in it.answer_ids], qid=int(it.id),
                                **extra).with_inputs("question"))
    return out


def spread_shapes(train: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Training examples taken round-robin over their pattern shapes (synthetic questions), others as given.

    Bootstrapping keeps the first demos that pass; in file order, a synthetic split's first questions
    are mostly one-hop (most sampled patterns are), and demos of one-hop queries alone teach a small LM
    to write multi-hop questions as one hop.
    """
    groups: dict[str, list[dspy.Example]] = {}
    for ex in train:
        groups.setdefault(ex.get("shape") or "", []).append(ex)
    if len(groups) < 2:
        return list(train)
    queues = list(groups.values())
    return [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]


def llm_steps(program: dspy.Module) -> dict[str, list[str]]:
    """The program's LLM steps and the full names of their predictors: ``{"reranker": ["reranker.score"]}``."""
    steps: dict[str, list[str]] = {}
    for name, _ in program.named_predictors():
        steps.setdefault(name.split(".")[0].split("[")[0], []).append(name)
    return steps


def step_problems(program: dspy.Module, config: AutofocusConfig, steps: Sequence[str],
                  optimizer: str | None = None) -> list[str]:
    """Why some of ``steps`` cannot be optimised in ``program`` (by ``optimizer``); empty when all can."""
    found = llm_steps(program)
    problems = []
    for step in steps:
        module = getattr(program, step, None)
        if step == "target_type" and hasattr(program, "target_type") and module is None:
            problems.append("target_type: the SKB has one candidate type, so step 1 asks no LLM")
        elif step == "reranker" and hasattr(program, "reranker") and module is None:
            problems.append("reranker: the config has reranker=none")
        elif step not in found:
            have = ", ".join(found) or "none"
            problems.append(f"{step}: {type(program).__name__} has no such LLM step (its LLM steps: {have})")
        elif step == "reranker" and getattr(module, "scoring", None) == "yes_no" and optimizer != "gold":
            problems.append(
                "reranker: the pointwise reranker scores a local LM by P(yes) of its next token, which no "
                "instruction changes and no bootstrapped trace reaches; use --optimizer gold (yes/no demos "
                "from the training answers), --reranker listwise/pairwise/tournament, or a hosted LM"
            )
        elif step == "reranker" and not config.steps.reranks:
            problems.append(f"reranker: steps={config.steps} never reaches step 8")
        elif hasattr(program, "query_graph") and step in ("cypher", "query_graph"):
            used = "query_graph" if config.query.query_format == "typed" else "cypher"
            if step != used:
                problems.append(f"{step}: query_format={config.query.query_format} uses the {used} step instead")
    return problems


def knn_problems(program: dspy.Module, steps: Sequence[str], train: Sequence[dspy.Example]) -> list[str]:
    """Why ``knn`` cannot show ``train`` as per-question demos of ``steps`` in ``program``."""
    problems = [f"{s}: knn shows gold outputs, which questions carry for {', '.join(GOLD_STEPS)} only"
                for s in steps if s not in GOLD_STEPS]
    if not hasattr(program, "nearest_demos"):
        problems.append(f"knn: {type(program).__name__} takes no per-question demos (afr does)")
    lacking = sum(not (ex.get("target_type") and ex.get("cypher")) for ex in train)
    if lacking:
        problems.append(f"knn: {lacking} of {len(train)} training questions carry no gold target type and Cypher "
                        "(synthetic splits from `autofocus synth` do)")
    return problems


def knn_demos(kb: KnowledgeBaseLike, train: Sequence[dspy.Example], k: int, steps: Sequence[str]) -> NearestDemos:
    """The training questions as a pool of per-question demos (their gold target type and Cypher)."""
    if k < 1:
        raise ValueError("knn needs --max-demos of at least 1 (the demos per question)")
    pool = [PoolQuestion(ex.question, ex.target_type, ex.cypher) for ex in train]
    return NearestDemos.build(kb, pool, k, [s for s in GOLD_STEPS if s in steps])


def _with_nearest(program: dspy.Module, near: NearestDemos) -> dspy.Module:
    program.nearest_demos = near
    return program


def _prepared(program: dspy.Module) -> dspy.Module:
    """A program that sets itself up on first use (HybGRAG collects in-context examples from the
    training split) does it now: the zero-shot system is the one with them, and the optimiser's
    candidate steps, swapped in later, are never overwritten by that collection."""
    prepare = getattr(program, "ensure_examples", None)
    if callable(prepare):
        prepare(Trace(system=getattr(program, "system", ""), question=""))
    return program


class _Programs:
    """One full program per thread (programs keep per-call state); optimisers' deep copies share it."""

    def __init__(self, factory: Callable[[], dspy.Module], lms: dict[str, Any]) -> None:
        self.factory = factory
        self.lms = lms
        self.lm_calls = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def get(self) -> dspy.Module:
        program = getattr(self._local, "program", None)
        if program is None:
            program = self._local.program = self.factory()
        return program

    def count(self, calls: int) -> None:
        with self._lock:
            self.lm_calls += calls

    def __deepcopy__(self, memo: dict[int, Any]) -> _Programs:
        return self


def _sharing_lms(module: dspy.Module) -> dict[int, Any]:
    """A ``copy.deepcopy`` memo that keeps the module's predictors' LMs as they are."""
    return {id(p.lm): p.lm for _, p in module.named_predictors() if p.lm is not None}


class StepProgram(dspy.Module):
    """The chosen LLM steps of a system as a DSPy program of their own (see the module docstring)."""

    def __init__(self, programs: _Programs, modules: dict[str, dspy.Module]) -> None:
        super().__init__()
        self._programs = programs
        self._steps = tuple(modules)
        for step, module in modules.items():
            setattr(self, step, copy.deepcopy(module, _sharing_lms(module)))

    def __deepcopy__(self, memo: dict[int, Any]) -> StepProgram:
        """Copies share the LMs (clients, not parameters; some hold locks that cannot be copied)."""
        memo.update(_sharing_lms(self))
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            setattr(new, key, copy.deepcopy(value, memo))
        return new

    def forward(self, question: str) -> dspy.Prediction:
        for name, predictor in self.named_predictors():
            if predictor.lm is None:  # optimisers' reset copies drop the step's own LM
                predictor.lm = self._programs.lms.get(name)
        program = self._programs.get()
        for step in self._steps:
            setattr(program, step, getattr(self, step))
        pred = program(question=question)
        self._programs.count(pred.trace.lm_calls)
        return pred


def shared_inputs(program: dspy.Module) -> list[Any]:
    """The input values every call of the program repeats: its schema context and the lists it keeps
    (FocusedRetriever's property names)."""
    context = getattr(program, "context", None)
    values = list(dataclasses.asdict(context).values()) if dataclasses.is_dataclass(context) else []
    return values + [v for v in vars(program).values() if isinstance(v, list) and v]


def compact_demos(predictor: dspy.Predict, shared: list[Any]) -> None:
    """Drop from each demo the inputs whose value every call repeats (see the module docstring), and what
    is no field of the step (a gold demo's answer ids and shape)."""
    inputs, fields = set(predictor.signature.input_fields), {*predictor.signature.fields, "augmented"}
    out = []
    for demo in predictor.demos:
        d = dict(demo) if isinstance(demo, dict) else demo.toDict()
        out.append(dspy.Example(**{k: v for k, v in d.items() if k in fields and not (k in inputs and v in shared)}))
    predictor.demos = out


@dataclass
class Scores:
    """Per-question scores of one program on one split, and their means."""

    rows: list[dict[str, float]]
    errors: int = 0

    @property
    def n(self) -> int:
        return len(self.rows)

    def mean(self) -> dict[str, float]:
        keys = [k for k in (*REPORTED, "lm_calls") if self.rows and k in self.rows[0]]
        return {k: sum(r[k] for r in self.rows) / len(self.rows) for k in keys}

    def summary(self) -> dict[str, Any]:
        return {"questions": self.n, "errors": self.errors, **self.mean()}


def evaluate(
    program: dspy.Module,
    data: Sequence[dspy.Example],
    candidates: Candidates | None = None,
    threads: int = 1,
    on_done: Callable[[], None] | None = None,
) -> Scores:
    """Run ``program`` on every example (threads inherit DSPy settings) and score it (``REPORTED``)."""

    def one(ex: dspy.Example) -> dict[str, float] | None:
        try:
            pred = program(question=ex.question)
        except Exception:  # programs degrade rather than raise; count what still does
            return None
        finally:
            if on_done is not None:
                on_done()
        row = _question_scores(ex.answer_ids, pred, candidates)
        row["lm_calls"] = float(pred.trace.lm_calls)
        return row

    if threads <= 1 or len(data) <= 1:
        rows = [one(ex) for ex in data]
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = {pool.submit(contextvars.copy_context().run, one, ex): i for i, ex in enumerate(data)}
            out: list[dict[str, float] | None] = [None] * len(data)
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
            rows = out
    zero = dict.fromkeys((*REPORTED, "lm_calls"), 0.0)
    return Scores(rows=[r if r is not None else dict(zero) for r in rows], errors=sum(r is None for r in rows))


@dataclass
class OptimizeResult:
    """The full system with the optimised steps (LMs as built), its config and how it was made."""

    program: dspy.Module
    system: str
    config: AutofocusConfig
    steps: list[str]
    predictors: list[str]
    metric: str
    zero_shot: StepProgram
    optimised: StepProgram
    val: dict[str, Scores] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    candidates: Candidates | None = field(default=None, repr=False)
    threads: int = 1
    task_lm: Any = field(default=None, repr=False)

    def compare(
        self, data: Sequence[dspy.Example], split: str,
        on_eval: Callable[[str, int], Callable[[], None] | None] | None = None,
    ) -> dict[str, Scores]:
        """Zero-shot and optimised programs on the same questions (e.g. the held-out test split)."""
        out = {}
        with dspy.context(lm=self.task_lm, callbacks=_with_usage_callback()):
            for key, program in (("zero_shot", self.zero_shot), ("optimised", self.optimised)):
                tick = on_eval(f"{key.replace('_', '-')} on {split}", len(data)) if on_eval else None
                out[key] = evaluate(program, data, self.candidates, self.threads, tick)
        self.metadata[split] = {k: v.summary() for k, v in out.items()}
        return out


def _with_usage_callback() -> list[Any]:
    """DSPy's callbacks plus autofocus's usage counter (a ``dspy.context`` hides later ``configure`` calls)."""
    callbacks = list(dspy.settings.get("callbacks") or [])
    return callbacks if any(isinstance(c, UsageCallback) for c in callbacks) else [*callbacks, UsageCallback()]


def make_optimizer(
    options: PromptOptOptions, metric: str, skb: SKB, candidates: Candidates | None, *, threads: int, val_size: int
) -> tuple[Any, dict[str, Any]]:
    """The DSPy optimiser ``options.optimizer`` and the extra ``compile`` arguments it takes besides
    the training set (``options.reflection_lm`` an LM object, not a spec)."""
    name, max_demos, trials, budget = options.optimizer, options.max_demos, options.trials, options.budget
    reflection_lm, seed = options.reflection_lm, options.seed
    score = objective(metric, candidates)
    threshold = DEMO_THRESHOLDS.get(metric)
    if name == "gold":
        return dspy.LabeledFewShot(k=max_demos), {"sample": False}
    if name == "knn":  # no compile step: the pool is searched per question (``knn_demos``)
        return None, {}
    if name == "bootstrap":
        return dspy.BootstrapFewShot(metric=score, metric_threshold=threshold, max_bootstrapped_demos=max_demos,
                                     max_labeled_demos=0, max_rounds=1), {}
    if name == "bootstrap-rs":
        return dspy.BootstrapFewShotWithRandomSearch(
            metric=score, metric_threshold=threshold, max_bootstrapped_demos=max_demos, max_labeled_demos=0,
            num_candidate_programs=trials or DEFAULT_RS_CANDIDATES, num_threads=threads,
        ), {"with_valset": True}
    if name == "mipro":
        by_trials = {"auto": None, "num_candidates": max(2, trials // 2)} if trials else {"auto": "light"}
        opt = dspy.MIPROv2(metric=score, metric_threshold=threshold, prompt_model=reflection_lm,
                           max_bootstrapped_demos=max_demos,
                           max_labeled_demos=0, num_threads=threads, seed=seed, verbose=False, **by_trials)
        extra: dict[str, Any] = {"with_valset": True, "requires_permission_to_run": False}
        if trials:
            extra |= {"num_trials": trials, "minibatch": val_size > 35}
        return opt, extra
    if name == "gepa":
        if reflection_lm is None:
            raise ValueError("GEPA needs a reflection LM (--reflection-lm): it rewrites instructions from feedback")
        by_budget = {"max_metric_calls": budget} if budget else {"auto": "light"}
        return dspy.GEPA(metric=feedback_metric(metric, skb, candidates), reflection_lm=reflection_lm,
                         num_threads=threads, seed=seed, **by_budget), {"with_valset": True}
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def optimise(
    kb: KnowledgeBaseLike,
    config: AutofocusConfig | None,
    train: Sequence[dspy.Example],
    val: Sequence[dspy.Example],
    options: PromptOptOptions | None = None,
    *,
    with_lms: bool = True,
    on_eval: Callable[[str, int], Callable[[], None] | None] | None = None,
) -> OptimizeResult:
    """Optimise ``options.steps`` of ``options.system`` on ``train`` and score zero-shot vs optimised
    on ``val``.

    Args:
        kb: the knowledge base (``autofocus.kb.KnowledgeBase``).
        config: base config; the saved program keeps the resolved one.
        train, val: ``examples(...)`` of the training and validation splits.
        options: the optimiser and its settings (``PromptOptOptions``; its splits, limits and ``out``
            are ``prompts_run``'s); ``reflection_lm`` an LM object (default: the task LM).
        with_lms: give steps their configured LMs (False: ``dspy.settings.lm``, for tests).
        on_eval: ``(label, n) -> tick`` for progress bars over the before/after evaluations.
    """
    options = options or PromptOptOptions()
    system, optimizer, metric, threads = options.system, options.optimizer, options.metric, options.threads
    reflection_lm, max_demos = options.reflection_lm, options.max_demos
    from autofocus.program.systems.registry import resolve_config
    from autofocus.runtime import assemble

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not train or not val:
        raise ValueError(f"need training and validation questions, got {len(train)} and {len(val)}")
    steps = list(dict.fromkeys(s.strip() for s in options.steps if s.strip()))
    if not steps:
        raise ValueError("no steps to optimise")
    name, cfg = resolve_config(system, config)
    metric = check_metric(metric or default_metric(name, steps))
    template = _prepared(assemble(system, kb, cfg, lms=with_lms))
    problems = step_problems(template, cfg, steps, optimizer)
    if optimizer == "gold":
        problems += [f"{s}: no gold output for it in any QA file (gold demos: {', '.join((*GOLD_STEPS, GOLD_JUDGE))})"
                     for s in steps if s not in (*GOLD_STEPS, GOLD_JUDGE)]
        problems += [f"{s}: the training questions carry no gold {s!r} (synthetic splits do)"
                     for s in steps if s in GOLD_STEPS and not any(ex.get(s) for ex in train)]
        method = getattr(getattr(template, GOLD_JUDGE, None), "method", None)
        if GOLD_JUDGE in steps and method != "pointwise":
            problems.append(f"{GOLD_JUDGE}: gold demos are yes/no judgements: use the pointwise reranker, not {method!r}")
    if optimizer == "knn":
        problems += knn_problems(template, steps, train)
    if problems:
        raise ValueError("cannot optimise " + "; ".join(problems))
    run_cfg = cfg
    if "reranker" not in steps and not needs_final_order(metric, cfg.merge.k) and cfg.rerank.reranker != "none":
        run_cfg = cfg.updated({"reranker": "none"})  # the objective never sees the reranker
    lms = {n: p.lm for n, p in template.named_predictors()}
    programs = _Programs(lambda: _prepared(assemble(system, kb, run_cfg, lms=with_lms)), lms)
    modules = {s: getattr(template, s) for s in steps}
    threads = threads or cfg.runtime.concurrency
    candidates = Candidates(kb.skb.candidate_ids)

    def scored(label: str, program: dspy.Module) -> Scores:
        tick = on_eval(label, len(val)) if on_eval else None
        return evaluate(program, val, candidates, threads, tick)

    task_lm = dspy.settings.lm or next((lm for lm in lms.values() if lm is not None), None)
    if task_lm is None:
        raise ValueError("no LM: configure one (dspy.configure / --lm)")
    opt, extra = make_optimizer(options, metric, kb.skb, candidates, threads=threads, val_size=len(val))
    if extra.pop("with_valset", False):
        extra["valset"] = list(val)
    near = knn_demos(kb, train, max_demos, steps) if optimizer == "knn" else None
    zero_shot = StepProgram(programs, modules)
    with dspy.context(lm=task_lm, callbacks=_with_usage_callback()):
        before = scored("zero-shot on val", zero_shot)
        reflections = len(getattr(reflection_lm, "history", []) or [])
        calls_before = programs.lm_calls
        start = time.perf_counter()
        judged = optimizer == "gold" and GOLD_JUDGE in steps
        compiled_steps = {s: m for s, m in modules.items() if not (judged and s == GOLD_JUDGE)}
        compiled = (opt.compile(StepProgram(programs, compiled_steps), trainset=spread_shapes(train), **extra)
                    if compiled_steps and near is None else None)
        judges = {n: p for n, p in template.named_predictors() if judged and n.startswith(f"{GOLD_JUDGE}.")}
        if judges:
            demos = yes_no_demos(kb, cfg, spread_shapes(train), max_demos)
            for predictor in judges.values():
                predictor.demos = list(demos)
    wall = time.perf_counter() - start
    optimise_calls = programs.lm_calls - calls_before
    shared = shared_inputs(template)
    chosen = dict(compiled.named_predictors()) if compiled is not None else {}
    for pname, predictor in template.named_predictors():
        if pname in chosen:
            lm = predictor.lm
            predictor.load_state({**chosen[pname].dump_state(), "lm": None})
            predictor.lm = lm
            if not options.full_demos:
                compact_demos(predictor, shared)
    chosen |= judges
    if near is not None:  # the steps keep their prompts; the program chooses their demos per question
        template.nearest_demos = near
        chosen |= {n: p for n, p in template.named_predictors() if n.split(".")[0] in steps}
        programs = _Programs(lambda: _with_nearest(_prepared(assemble(system, kb, run_cfg, lms=with_lms)), near), lms)
    optimised = StepProgram(programs, modules)
    with dspy.context(lm=task_lm, callbacks=_with_usage_callback()):
        after = scored("optimised on val", optimised)
    state = program_state(template)
    zero_shot_instructions = {n: p.signature.instructions for n, p in zero_shot.named_predictors()}
    metadata = {
        "optimizer": optimizer,
        "steps": steps,
        "predictors": sorted(chosen),
        "metric": metric,
        "max_demos": max_demos,
        "trials": options.trials,
        "budget": options.budget,
        "seed": options.seed,
        "full_demos": options.full_demos,
        "train_size": len(train),
        "val_size": len(val),
        "train_ids": [ex.get("qid") for ex in train],
        "val_ids": [ex.get("qid") for ex in val],
        "lm": {n: getattr(lm, "model", None) for n, lm in lms.items() if n in chosen},
        "reflection_lm": getattr(reflection_lm, "model", None),
        "wall_s": round(wall, 2),
        "program_lm_calls": optimise_calls,
        "reflection_lm_calls": len(getattr(reflection_lm, "history", []) or []) - reflections,
        "demos": {n: len(state[n]["demos"]) for n in chosen},
        "nearest_demos": {"k": near.k, "pool": len(near.pool), "steps": list(near.steps)} if near else None,
        "instructions_changed": sorted(
            n for n in chosen if state[n]["signature"]["instructions"] != zero_shot_instructions[n]
        ),
        "val": {"zero_shot": before.summary(), "optimised": after.summary()},
    }
    return OptimizeResult(
        program=template, system=system, config=cfg, steps=steps, predictors=sorted(chosen), metric=metric,
        zero_shot=zero_shot, optimised=optimised, val={"zero_shot": before, "optimised": after},
        metadata=metadata, candidates=candidates, threads=threads, task_lm=task_lm,
    )

