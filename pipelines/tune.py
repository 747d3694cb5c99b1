"""``tune``: a Ray Tune sweep of one phase (``ppo``, ``grpo``, ``dpo`` or ``selfplay``) over keys of its section.

    chess-rl tune --config tiny --phase grpo --space grpo.beta=0,0.04,0.1 --set grpo.iterations=40
    chess-rl tune --phase selfplay --search random --samples 8 --space 'selfplay.mcts_cpuct={uniform: [0.5, 4]}'
    chess-rl tune --phase ppo --space ppo.kl_coef=0.01,0.1 ppo.learning_rate=1e-5,3e-5 --scheduler fifo
    chess-rl tune --phase dpo --space dpo.beta=0.03,0.1,0.3 --set dpo.max_steps=100
    chess-rl ppo --config runs/demo/tune/sweep/best.yaml      # the best trial's config, as a preset

Each trial is a real run of the phase: the same code as ``chess-rl <phase>``, reading its inputs
(the sft and reward models, the games) from the run like the phase itself, with its outputs
under ``<storage>/<run>/tune/<name>/trials/<trial>/``. The learner's reports (every
``checkpoint_interval`` iterations for ppo and grpo, every iteration for selfplay, every
``eval_every`` steps for dpo, whose ``iteration`` is its optimizer step) reach Tune
through Ray Train's ``TuneReportCallback``; ASHA stops the trials that trail the others at the
same iteration. MLflow: the sweep is the ``tune`` run under this invocation's parent run, and each
trial a run nested under it (``MLflowLoggerCallback`` with the ``mlflow.parentRunId`` tag), with
the trial's parameters and every report. At the end, ``best.yaml`` in the sweep's folder is the
whole config with the best trial's values: ``--config best.yaml`` runs it.

The same command again resumes the sweep (``Tuner.restore``): finished trials are kept, an
interrupted trial starts again and its phase resumes from its own checkpoints. A sweep folder
that holds another search space is an error (pick another ``--name``).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cluster.errors import ConfigError, UserError
from cluster.runtime import RayInfo
from cluster.storage import Storage
from cluster.tracking import PhaseRun
from pipelines.cli import one_line
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult, execute, phase_logger, run_phase
from pipelines.config import TUNE_DEFAULTS, ChessRLConfig, TuneConfig
from pipelines.rlaif import phase_module

SUMMARY = one_line("tune")
DESCRIPTION = __doc__.split("\n\n", 2)[1] if __doc__ else ""

#: Ray Tune needs a non-empty resource request per trial; the trial's own work (the phase's
#: learner, collectors, engines) asks for its CPUs itself, outside the trial's placement group.
TRIAL_RESOURCES: dict[str, float] = {"cpu": 0, "memory": 1024}


def sweep_space(config: ChessRLConfig) -> dict[str, Any]:
    """The sweep's search space (the phase's default when none is given), every key checked:
    it must name a key of the swept phase's section, and every value (or both ends of a range)
    must be one that key allows. A mistake is one ConfigError naming the key and what is allowed.

    >>> from pipelines.config import TuneConfig
    >>> sweep_space(ChessRLConfig(tune=TuneConfig(phase="selfplay")))
    {'selfplay.mcts_cpuct': [1.0, 1.5, 2.5, 4.0]}
    >>> sweep_space(ChessRLConfig(tune=TuneConfig(phase="ppo", space={"ppo.kl": [0.1]})))
    Traceback (most recent call last):
    ...
    cluster.errors.ConfigError: tune.space: 'ppo.kl' is not a key of ppo (did you mean ppo.kl_coef?)
    """
    cfg = config.tune
    space = dict(cfg.space) or dict(TUNE_DEFAULTS[cfg.phase][2])
    section_name = cfg.phase
    section: BaseModel = getattr(config, section_name)
    fields = type(section).model_fields
    for key, spec in space.items():
        prefix, _, name = key.partition(".")
        if prefix != section_name:
            raise ConfigError(
                f"tune.space: {key!r}: a {section_name} sweep varies keys of its own section ({section_name}.KEY)"
            )
        if name not in fields or isinstance(getattr(section, name), BaseModel):
            import difflib

            close = [f for f in fields if f.startswith(name)] or difflib.get_close_matches(
                name, list(fields), n=1
            )
            hint = f" (did you mean {section_name}.{close[0]}?)" if close else f"; keys: {', '.join(fields)}"
            raise ConfigError(f"tune.space: {key!r} is not a key of {section_name}{hint}")
        values = spec if isinstance(spec, list) else next(iter(spec.values()))
        for value in values:
            try:
                type(section).model_validate({**section.model_dump(), name: value})
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"].removeprefix("Value error, ")  # a rule among keys says them
                raise ConfigError(f"tune.space: {key}={value!r}: {reason}") from None
    return space


def check_tune(config: ChessRLConfig, inputs: Inputs) -> dict[str, Any]:
    """Before Ray starts: the space (:func:`sweep_space`), then every input of the swept phase
    (its own ``Phase.check`` on the base config; its outputs go to the trials' folders, so its
    own folder is not looked at). Returns the space."""
    space = sweep_space(config)
    phase = phase_module(config.tune.phase)
    if phase.check is not None:
        phase.check(config, replace(inputs, produced=inputs.produced | {phase.name}))
    return space


def tune_param_space(space: dict[str, Any], search: str) -> dict[str, Any]:
    """Tune's ``param_space``: a list is a grid (``search: grid``) or a choice (``random``), a
    ``{uniform|loguniform|randint: [low, high]}`` a distribution."""
    from ray import tune

    out: dict[str, Any] = {}
    for key, spec in space.items():
        if isinstance(spec, list):
            out[key] = tune.grid_search(spec) if search == "grid" else tune.choice(spec)
        else:
            ((kind, (low, high)),) = spec.items()
            out[key] = getattr(tune, kind)(low, high)
    return out


def with_params(config: ChessRLConfig, params: dict[str, Any]) -> ChessRLConfig:
    """``config`` with a trial's ``{"section.key": value}`` applied (validated again)."""
    data = config.model_dump(mode="json")
    for key, value in params.items():
        section, _, name = key.partition(".")
        data[section][name] = value
    return ChessRLConfig.model_validate(data)


def metric_and_mode(cfg: TuneConfig) -> tuple[str, str]:
    """The metric the sweep optimises and whether high is better."""
    metric, mode, _ = TUNE_DEFAULTS[cfg.phase]
    metric = cfg.metric or metric
    if cfg.mode:
        return metric, cfg.mode
    return metric, mode if metric == TUNE_DEFAULTS[cfg.phase][0] else ("min" if "loss" in metric else "max")


def fingerprint(config: ChessRLConfig, space: dict[str, Any]) -> str:
    """What a sweep folder is for: the swept phase's section, the space and the search. A resumed
    sweep must have the same."""
    cfg = config.tune
    data = {
        "phase": cfg.phase,
        "section": getattr(config, cfg.phase).model_dump(mode="json"),
        "space": space,
        "search": cfg.search,
        "samples": cfg.samples,
        "metric": metric_and_mode(cfg),
        "scheduler": cfg.scheduler,
        "seed": config.run.seed,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def run_trial(
    params: dict[str, Any],
    base: dict[str, Any],
    run_uri: str,
    sweep_uri: str,
    ray_info: RayInfo,
    trial_id: str,
    reporter: Any,
) -> dict[str, Any]:
    """One trial (a Ray task outside the trial's placement group, so that the phase's actors and
    learner get the cluster's CPUs): the phase's ``run`` with the trial's values, its outputs in
    the trial's folder; returns the phase's summary (also written as ``summary.json`` there)."""
    config = with_params(ChessRLConfig.model_validate(base), params)
    # unique actor names (``<run>/<role>-<i>``) when trials run at once
    config = config.model_copy(
        update={"run": config.run.model_copy(update={"name": f"{config.run.name}-{trial_id}"})}
    )
    phase = phase_module(config.tune.phase)
    folder = Storage.from_uri(sweep_uri).child("trials").child(trial_id)
    context = PhaseContext(
        config=config,
        run_storage=Storage.from_uri(run_uri),
        tracking=PhaseRun(active=False),
        ray=ray_info,
        log=phase_logger(f"{phase.name} {trial_id}"),
        outputs={phase.name: folder},
        train_callbacks=[reporter],
    )
    result = execute(phase, context)
    summary = json.loads(json.dumps({**result.summary, "ok": result.ok}, default=str))
    folder.write_text("summary.json", json.dumps(summary, indent=1))
    return summary


def _trainable(base: dict[str, Any], run_uri: str, sweep_uri: str, ray_info: RayInfo) -> Any:
    """The function Tune runs per trial (in a Tune actor): it hands the work to :func:`run_trial`."""
    import ray
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    # max_calls=1: the task's worker exits with it, and with it every actor the phase made there
    # (a reused worker kept the last trial's engines, and their CPUs, alive)
    remote = ray.remote(num_cpus=0, max_retries=0, max_calls=1)(run_trial)

    def trial(params: dict[str, Any]) -> None:
        trial_id = tune.get_context().get_trial_id()
        task = remote.options(scheduling_strategy="DEFAULT", name=f"tune-trial-{trial_id}")
        ray.get(task.remote(params, base, run_uri, sweep_uri, ray_info, trial_id, TuneReportCallback()))

    return tune.with_resources(trial, TRIAL_RESOURCES)


def _progress_callback(log: Any, metric: str, total: int) -> Any:
    """A Tune callback that prints one driver line per report and per finished trial."""
    from ray.tune import Callback

    class Progress(Callback):  # type: ignore[misc]
        ended = 0

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **_: Any
        ) -> None:
            value = result.get(metric)
            shown = f"{value:.4g}" if isinstance(value, (int, float)) else "-"
            log(
                f"trial {trial.trial_id} ({_params_text(trial.config)}): iteration {result.get('iteration', '?')}, "
                f"{metric} {shown}"
            )

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **_: Any) -> None:
            self.ended += 1
            log(f"trial {trial.trial_id} ended ({self.ended}/{total} trials ended)")

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **_: Any) -> None:
            self.ended += 1
            log(f"trial {trial.trial_id} failed: {_first_error_line(trial)}")

    return Progress()


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items())
    )


def _first_error_line(trial: Any) -> str:
    text = str(getattr(trial, "error_message", None) or getattr(trial, "error_file", "") or "")
    for line in reversed(text.strip().splitlines()):
        if "Error" in line or "error" in line:
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else "see the trial's error file"


def run_tune(context: PhaseContext) -> PhaseResult:
    """Run (or resume) the sweep, then write ``best.yaml`` and the trials' table."""
    from ray import tune

    config, cfg, log = context.config, context.config.tune, context.log
    space = sweep_space(config)
    metric, mode = metric_and_mode(cfg)
    sweep = context.phase_storage("tune").child(cfg.name)
    key = fingerprint(config, space)
    if sweep.exists("sweep.json"):
        previous = json.loads(sweep.read_text("sweep.json"))
        if previous.get("key") != key:
            raise ConfigError(
                f"tune.name: the sweep at {sweep.uri} was started with another space or {cfg.phase} config; "
                f"give this one another --name (or delete that folder)"
            )
    sweep.write_text("sweep.json", json.dumps({"key": key, "space": space, "phase": cfg.phase}, indent=1))
    log(
        f"sweep {cfg.name!r} of {cfg.phase} over {json.dumps(space)} ({cfg.search}, {cfg.scheduler}), "
        f"{metric} ({mode}) -> {sweep.uri}"
    )

    base = config.model_dump(mode="json")
    trainable = _trainable(base, context.run_storage.uri, sweep.uri, context.ray)
    tune_root = sweep.child("tune")
    storage_path = tune_root.root if tune_root.is_local else tune_root.path()
    filesystem = None if tune_root.is_local else tune_root.fs
    experiment = f"{storage_path.rstrip('/')}/{cfg.name}"
    if tune.Tuner.can_restore(experiment, storage_filesystem=filesystem):
        log(f"resuming the sweep in {tune_root.uri_of(cfg.name)}")
        tuner = tune.Tuner.restore(
            experiment,
            trainable,
            resume_unfinished=True,
            resume_errored=True,
            param_space=tune_param_space(space, cfg.search),
            storage_filesystem=filesystem,
        )
    else:
        tuner = new_tuner(context, trainable, space, (storage_path, filesystem), metric, mode)
    results = tuner.fit()
    iterations = phase_iterations(config, cfg.phase)
    rows = trial_rows(results, metric, iterations)
    sweep.write_text("trials.json", json.dumps(rows, indent=1, default=str))
    context.tracking.log_dict({"trials": rows}, "trials.json")
    scored = [r for r in rows if isinstance(r["metric"], float) and math.isfinite(r["metric"])]
    if not scored:
        errors = [r["error"] for r in rows if r["error"]]
        raise UserError(
            f"tune: no trial reported {metric!r}"
            + (
                f"; the first trial's error: {errors[0]}"
                if errors
                else f" (reported: {', '.join(rows[0]['reported']) if rows else 'nothing'})"
            )
        )
    best = best_row(scored, mode)
    best_config = with_params(config, best["params"])
    text = (
        f"# The best trial ({best['trial']}) of the sweep {cfg.name!r} of {cfg.phase}: "
        f"{metric} {best['metric']:.4g} ({mode}).\n# {_params_text(best['params'])}\n"
        + yaml.safe_dump(best_config.model_dump(mode="json"), sort_keys=False)
    )
    sweep.write_text("best.yaml", text)
    context.tracking.log_params({f"best.{k}": v for k, v in best["params"].items()})
    context.tracking.log_metrics({f"best_{metric}": best["metric"]})
    summary = {
        "phase": cfg.phase,
        "trials": len(rows),
        "metric": metric,
        "mode": mode,
        "best_trial": best["trial"],
        "best_params": best["params"],
        f"best_{metric}": best["metric"],
        "best_config": sweep.uri_of("best.yaml"),
    }
    return PhaseResult(summary, lines=summary_lines(rows, best, metric, cfg.phase, sweep))


def phase_iterations(config: ChessRLConfig, phase: str) -> int:
    """How far a trial of ``phase`` runs, in the ``iteration`` its learner reports: learner
    iterations (ppo, grpo, selfplay) or optimizer steps (dpo, a transformers Trainer).

    >>> phase_iterations(ChessRLConfig(), "dpo"), phase_iterations(ChessRLConfig(), "ppo")
    (300, 100)
    """
    section = getattr(config, phase)
    return int(section.max_steps if phase == "dpo" else section.iterations)


def new_tuner(
    context: PhaseContext,
    trainable: Any,
    space: dict[str, Any],
    storage: tuple[str, Any],
    metric: str,
    mode: str,
) -> Any:
    """A fresh sweep: ASHA on the learner's ``iteration`` (or FIFO), the driver's progress lines,
    and an MLflow run per trial nested under the sweep's run (``mlflow.parentRunId``)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    config, cfg = context.config, context.config.tune
    scheduler = None
    if cfg.scheduler == "asha":
        scheduler = ASHAScheduler(
            time_attr="iteration",
            max_t=max(phase_iterations(config, cfg.phase), 1),
            grace_period=cfg.grace_period,
            reduction_factor=cfg.reduction_factor,
        )
    total = cfg.samples * (math.prod(len(v) for v in space.values()) if cfg.search == "grid" else 1)
    callbacks: list[Any] = [_progress_callback(context.log, metric, total)]
    if context.tracking.active and context.tracking.uri:
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        tags = {
            "mlflow.parentRunId": context.tracking.run_id or "",
            "chess_rl.run": config.run.name,
            "chess_rl.sweep": cfg.name,
        }
        callbacks.append(
            MLflowLoggerCallback(
                tracking_uri=context.tracking.uri, experiment_name=config.tracking.experiment, tags=tags
            )
        )
    return tune.Tuner(
        trainable,
        param_space=tune_param_space(space, cfg.search),
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            scheduler=scheduler,
            num_samples=cfg.samples,
            max_concurrent_trials=cfg.max_concurrent,
        ),
        run_config=tune.RunConfig(
            name=cfg.name,
            storage_path=storage[0],
            storage_filesystem=storage[1],
            callbacks=callbacks,
            verbose=0,
        ),
    )


def best_row(scored: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """The best trial among those that got furthest: a trial ASHA stopped was behind the others
    at its last report, and its value then is not comparable with the end of a finished trial.

    >>> rows = [{"trial": "a", "iteration": 4, "metric": 0.9}, {"trial": "b", "iteration": 6, "metric": 0.5},
    ...         {"trial": "c", "iteration": 6, "metric": 0.7}]
    >>> best_row(rows, "max")["trial"], best_row(rows, "min")["trial"]
    ('c', 'b')
    """
    furthest = max(r["iteration"] or 0 for r in scored)
    final = [r for r in scored if (r["iteration"] or 0) == furthest]
    return (max if mode == "max" else min)(final, key=lambda r: r["metric"])


def trial_rows(results: Any, metric: str, iterations: int) -> list[dict[str, Any]]:
    """One row per trial: its values, how it ended (finished, stopped early by ASHA, failed),
    its last report's metric and iteration."""
    rows = []
    for result in results:
        reported = result.metrics or {}
        trial_id = str(reported.get("trial_id") or (result.path or "?").rstrip("/").rsplit("/", 1)[-1])
        value = reported.get(metric)
        rows.append(
            {
                "trial": trial_id,
                "params": {k: v for k, v in (result.config or {}).items()},
                "status": "failed"
                if result.error
                else ("finished" if (reported.get("iteration") or 0) >= iterations else "stopped early"),
                "iteration": reported.get("iteration"),
                "metric": float(value) if isinstance(value, (int, float)) else None,
                "error": _error_line(result.error) if result.error else "",
                "reported": sorted(k for k in reported if not k.startswith(("config", "time_", "timestamp")))[
                    :12
                ],
            }
        )
    return sorted(rows, key=lambda r: r["trial"])


def _error_line(error: BaseException) -> str:
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, UserError):
            return str(cause)
        cause = getattr(cause, "cause", None) or cause.__cause__
    lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else type(error).__name__


def summary_lines(
    rows: list[dict[str, Any]], best: dict[str, Any], metric: str, phase: str, sweep: Storage
) -> list[str]:
    """The sweep's table and where its best config is."""
    width = max(len(_params_text(r["params"])) for r in rows)
    lines = ["tune summary", f"  {'trial':<12} {'values':<{width}}  {'ended':<14} {'iteration':>9}  {metric}"]
    for r in rows:
        shown = f"{r['metric']:.4g}" if r["metric"] is not None else "-"
        lines.append(
            f"  {r['trial']:<12} {_params_text(r['params']):<{width}}  {r['status']:<14} "
            f"{r['iteration'] if r['iteration'] is not None else '-':>9}  {shown}"
        )
    location = sweep.root + "/best.yaml" if sweep.is_local else sweep.uri_of("best.yaml")
    lines += [
        f"  best: {best['trial']} ({_params_text(best['params'])}), {metric} {best['metric']:.4g}",
        f"  best config: {location}",
        f"  run it: chess-rl {phase} --config {location}"
        if sweep.is_local
        else f"  run it: copy it here, then chess-rl {phase} --config best.yaml",
    ]
    return lines


PHASE = Phase(
    name="tune",
    section="tune",
    section_model=TuneConfig,
    run=run_tune,
    check=check_tune,
    summary=SUMMARY,
    description=DESCRIPTION,
)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """``chess-rl tune``. An embedded Ray starts with its dashboard here: ASHA stops a trial by
    killing it, and only through the dashboard's state API does Ray Train's PlacementGroupCleaner
    see the trial's learner gone and free its CPUs (without it the next trial waited forever)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return run_phase(PHASE, ["--dashboard", *args], prog=prog)


if __name__ == "__main__":
    sys.exit(main())
