"""Config plumbing: YAML preset -> typed config (pydantic) -> command-line overrides.

A config file is a YAML mapping of sections (``run``, ``ray``, ``tracking`` and one per phase).
The root model that lists the sections lives with the phases (``pipelines.config``); this module
holds the machinery, which knows nothing about chess:

- :func:`resolve_preset` turns ``tiny`` into ``configs/tiny.yaml`` (or accepts a path);
- :func:`load_config` reads the file, applies dotted overrides and validates the whole thing, so
  an unknown key or a bad value anywhere is one :class:`~cluster.errors.ConfigError` that names
  the file (or the flag), the key and what is allowed;
- :func:`add_section_flags` generates one ``--flag`` per field of a section, with the field's
  docstring as help text, so every flag is documented where the field is.

>>> load_config(RunSection, data={"name": "blitz-2000"}).name
'blitz-2000'
>>> load_config(RunSection, data={"nmae": "x"}, source="my.yaml")
Traceback (most recent call last):
...
cluster.errors.ConfigError: my.yaml: nmae: unknown key (did you mean 'name'?); allowed keys: name, seed, storage
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from cluster.errors import ConfigError

#: Where the presets live: ``configs/`` at the repository root.
PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"

T = TypeVar("T", bound=BaseModel)


def absolute_local_path(value: str | None) -> str | None:
    """A local path made absolute from the directory the command runs in; a URI (``s3://``,
    ``file://``) or nothing as it is. A model path typed relative (``runs/demo/sft/model``) so
    reaches Ray Train workers, whose working directory is their own.

    >>> absolute_local_path("s3://bucket/runs/sft/model")
    's3://bucket/runs/sft/model'
    >>> absolute_local_path("runs/demo/sft/model") == os.path.join(os.getcwd(), "runs/demo/sft/model")
    True
    """
    if not value or "://" in value:
        return value
    return os.path.abspath(os.path.expanduser(value))


#: A config key naming a saved model: a local path (made absolute) or a URI.
ModelPath = Annotated[str, AfterValidator(absolute_local_path)]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, field docstrings are help text."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


class RunSection(Section):
    """What this invocation is called and where it writes."""

    name: str = Field("demo", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Run name; outputs go to <storage>/<name>/<phase>/ (letters, digits, '.', '_', '-')."""
    storage: str = "./runs"
    """Where runs are written: a local path, file:///abs/path or s3://bucket/prefix."""
    seed: int = 7
    """Random seed for everything that samples."""


class RaySection(Section):
    """How to get a Ray cluster: join one (address) or start an embedded local one."""

    address: str | None = None
    """Cluster to join ('auto', 'host:6379', 'ray://host:10001'). RAY_ADDRESS and --address win."""
    num_cpus: int | None = Field(None, ge=1)
    """CPUs of the embedded local Ray (default: all of this machine's)."""
    num_gpus: int | None = Field(None, ge=0)
    """GPUs of the embedded local Ray (default: detected)."""
    object_store_gb: float | None = Field(2.0, gt=0)
    """Object store size of the embedded local Ray, GiB (null: min(30% of RAM, 4))."""
    dashboard: bool = False
    """Start the Ray dashboard with the embedded local Ray."""
    dashboard_host: str = "127.0.0.1"
    """Interface the embedded dashboard binds to (loopback unless you ask otherwise)."""
    dashboard_port: int = Field(8265, ge=1, le=65535)
    """Port of the embedded dashboard."""


class TrackingSection(Section):
    """MLflow tracking."""

    enabled: bool = True
    """Log params, metrics and artifacts to MLflow."""
    uri: str | None = None
    """Tracking URI; MLFLOW_TRACKING_URI wins; default: sqlite file <storage>/mlflow.db (local storage), or
    ~/.chess-rl/mlflow.db on the driver's machine, copied to <storage>/mlflow.db after each phase (S3 storage)."""
    experiment: str = "chess-rl"
    """MLflow experiment name."""


# ---------------------------------------------------------------------------------------------
# presets and YAML


def available_presets(preset_dir: Path = PRESET_DIR) -> list[str]:
    """Names of the presets in ``configs/`` (``['cluster', 'demo', 'small', 'tiny']``)."""
    return sorted(p.stem for p in preset_dir.glob("*.yaml"))


def resolve_preset(name_or_path: str, preset_dir: Path = PRESET_DIR) -> Path:
    """``tiny`` -> ``configs/tiny.yaml``; a path to a YAML file is returned as it is."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not candidate.is_file():
            raise ConfigError(f"config file not found: {name_or_path!r}")
        return candidate
    preset = preset_dir / f"{name_or_path}.yaml"
    if not preset.is_file():
        raise ConfigError(
            f"unknown preset {name_or_path!r}; presets: {', '.join(available_presets(preset_dir))}"
            " (or pass the path of a YAML file)"
        )
    return preset


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; a syntax error or a non-mapping is a ConfigError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config: {exc}", source=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}invalid YAML: {problem}", source=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a mapping of sections, not {type(data).__name__}", source=str(path)
        )
    return data


def read_with_extends(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    r"""A config file, on top of the preset (or file) its ``extends:`` names, recursively: a
    file changes only what differs from its base.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "mine.yaml").write_text("extends: tiny\nselfplay: {episodes: 8}\n")
    >>> raw = read_with_extends(folder / "mine.yaml")
    >>> raw["selfplay"]["episodes"], raw["selfplay"]["batch_size"], "extends" in raw
    (8, 128, False)
    """
    raw = read_yaml(path)
    base = raw.pop("extends", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise ConfigError(f"extends: expected a preset name or a YAML file, not {base!r}", source=str(path))
    relative = Path(path).parent / base
    base_path = relative if relative.suffix in (".yaml", ".yml") and relative.is_file() else None
    try:
        base_path = base_path or resolve_preset(base)
    except ConfigError as exc:
        raise ConfigError(f"extends: {exc}", source=str(path)) from None
    if base_path.resolve() in seen or base_path.resolve() == Path(path).resolve():
        raise ConfigError(f"extends: {base!r} extends this file again (a cycle)", source=str(path))
    return _merged(read_with_extends(base_path, (*seen, Path(path).resolve())), raw)


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# loading and validation


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(d, "prepare.min_elo", 2000)`` sets ``d["prepare"]["min_elo"]``."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{key}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = value


def load_config(
    model: type[T],
    *,
    path: Path | None = None,
    data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, tuple[Any, str]] | None = None,
    source: str | None = None,
) -> T:
    """Validate a config from a YAML file (or a mapping) plus overrides.

    ``overrides`` maps dotted keys to ``(value, origin)``; the origin (``"--min-elo"``) is what
    an error names when the bad value came from the command line.
    """
    if path is not None:
        raw: dict[str, Any] = read_with_extends(path)
        source = source or str(path)
    else:
        raw = _deep_copy(dict(data or {}))
    origins: dict[tuple[str, ...], str] = {}
    for key, (value, origin) in (overrides or {}).items():
        set_dotted(raw, key, value)
        origins[tuple(key.split("."))] = origin
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, model, source, origins, raw) from None


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def _config_error(
    exc: ValidationError,
    model: type[BaseModel],
    source: str | None,
    origins: Mapping[tuple[str, ...], str],
    raw: Mapping[str, Any] | None = None,
) -> ConfigError:
    """One error naming, for each bad value, where it came from (file or flag), key and what is allowed."""
    problems: list[tuple[str | None, str]] = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        key = ".".join(loc)
        origin = next((o for k, o in origins.items() if loc[: len(k)] == k or k[: len(loc)] == loc), None)
        where = f"command line ({origin})" if origin is not None else source
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            hint = difflib.get_close_matches(loc[-1], allowed, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            kind = "section" if len(loc) == 1 and _is_sectioned(model) else "key"
            problems.append(
                (where, f"{key}: unknown {kind}{did_you_mean}; allowed keys: {', '.join(allowed)}")
            )
        elif err["type"] == "missing":
            problems.append((where, f"{key}: required key is missing"))
        elif err["type"] == "value_error" and isinstance(err.get("input"), (dict, BaseModel)):
            # a check across several keys of one section (a model validator)
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(_rule_problem(loc, msg, where, source, origins, raw))
        else:
            allowed = _allowed_values(model, loc)
            msg = err["msg"][0].lower() + err["msg"][1:]
            problems.append((where, f"{key}: {err.get('input')!r} is not allowed: {msg}{allowed}"))
    places = {where for where, _ in problems}
    if len(places) == 1:
        return ConfigError("; ".join(text for _, text in problems), source=places.pop())
    return ConfigError("; ".join(f"{where}: {text}" if where else text for where, text in problems))


def _rule_problem(
    loc: tuple[str, ...],
    msg: str,
    where: str | None,
    source: str | None,
    origins: Mapping[tuple[str, ...], str],
    raw: Mapping[str, Any] | None,
) -> tuple[str | None, str]:
    """Where a broken rule among a section's keys came from, and its text. A message that names
    the keys (``ppo.num_workers``) is not prefixed with the section again, and comes from the flags
    that gave those keys (``command line (--num-workers)``), the file where it set the others."""
    key = ".".join(loc)
    names = re.findall(rf"(?<![\w.]){re.escape(key)}\.(\w+)", msg) if key else []
    if not names:  # a message of bare names: the section's first flag, else the file
        return where, f"{key}: {msg}" if key else msg
    named = [(*loc, name) for name in names]
    flags = ", ".join(dict.fromkeys(origins[k] for k in named if k in origins))
    if not flags:
        return source, msg
    from_file = source is not None and any(k not in origins and _has_key(raw or {}, k) for k in named)
    return f"{source} and command line ({flags})" if from_file else f"command line ({flags})", msg


def _has_key(data: Mapping[str, Any], parts: Sequence[str]) -> bool:
    node: Any = data
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _is_sectioned(model: type[BaseModel]) -> bool:
    """A root config whose every field is a section."""
    return all(_unwrap_model(f.annotation) is not None for f in model.model_fields.values())


def _field_annotation(model: type[BaseModel], loc: Sequence[str]) -> Any:
    annotation: Any = model
    for part in loc:
        base = _unwrap_model(annotation)
        if base is None or part not in base.model_fields:
            return None
        annotation = base.model_fields[part].annotation
    return annotation


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: Sequence[str]) -> list[str]:
    base = _unwrap_model(_field_annotation(model, loc)) if loc else model
    return sorted(base.model_fields) if base is not None else []


def _allowed_values(model: type[BaseModel], loc: Sequence[str]) -> str:
    # Find the innermost field (list items have integer locs).
    named = [p for p in loc if not p.isdigit()]
    annotation = _field_annotation(model, named)
    choices = _literal_choices(annotation)
    return f" (allowed: {', '.join(map(str, choices))})" if choices else ""


def _literal_choices(annotation: Any) -> list[Any]:
    if annotation is None:
        return []
    if typing.get_origin(annotation) is Literal:
        return list(typing.get_args(annotation))
    out: list[Any] = []
    for arg in typing.get_args(annotation):
        out.extend(_literal_choices(arg))
    return out


# ---------------------------------------------------------------------------------------------
# command-line flags generated from sections


def flag_name(field: str) -> str:
    """``min_elo`` -> ``--min-elo``."""
    return "--" + field.replace("_", "-")


def add_section_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    section_model: type[BaseModel],
    section: str,
    *,
    skip: Sequence[str] = (),
) -> dict[str, tuple[str, str]]:
    """Add one flag per scalar/list field of ``section_model``; help text = field docstring.

    Returns ``{argparse dest: (dotted key, flag)}`` for :func:`overrides_from_args`.
    Flags default to ``None`` (= keep the config's value).
    """
    mapping: dict[str, tuple[str, str]] = {}
    for name, field in section_model.model_fields.items():
        if name in skip:
            continue
        annotation = field.annotation
        if _unwrap_model(annotation) is not None:
            continue
        flag = flag_name(name)
        dest = f"{section}__{name}"
        default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        help_text = (field.description or "").rstrip(".").replace("%", "%%")
        choices = _literal_choices(annotation)
        is_list = _is_list(annotation)
        if choices:
            help_text += f" (choices: {', '.join(map(str, choices))})"
        if default not in (None, [], (), {}):
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            help_text += f" [default: {shown}]"
        kwargs: dict[str, Any] = {"dest": dest, "default": None, "help": help_text}
        if _is_bool(annotation):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(annotation) is dict:  # KEY=VALUE items; the section's validator reads them
            kwargs["nargs"] = "+"
            kwargs["metavar"] = "KEY=VALUE"
        elif is_list:
            kwargs["nargs"] = "*"  # "--inputs" with nothing after it empties the list
            item = _metavar(annotation, "")
            kwargs["metavar"] = item or (name.upper()[:-1] if name.endswith("s") else name.upper())
        else:
            kwargs["metavar"] = _metavar(annotation, name)
            scalar = _scalar_type(annotation)
            if scalar is not None:
                kwargs["type"] = scalar
        parser.add_argument(flag, **kwargs)
        mapping[dest] = (f"{section}.{name}", flag)
    return mapping


def overrides_from_args(
    args: argparse.Namespace, mapping: Mapping[str, tuple[str, str]]
) -> dict[str, tuple[Any, str]]:
    """The flags the user actually gave, as ``{dotted key: (value, flag)}``."""
    out: dict[str, tuple[Any, str]] = {}
    for dest, (key, flag) in mapping.items():
        value = getattr(args, dest, None)
        if value is not None:
            out[key] = (value, flag)
    return out


def parse_set_overrides(items: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """``--set prepare.min_elo=2000`` style overrides; values are parsed as YAML scalars/lists."""
    out: dict[str, tuple[Any, str]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+", key):
            raise ConfigError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, for example --set prepare.min_elo=2000"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        out[key] = (value, f"--set {key}")
    return out


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or (bool in typing.get_args(annotation) and _is_optional(annotation))


def _is_optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(
        annotation
    )


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) in (list, tuple, Sequence):
        return True
    return any(_is_list(a) for a in typing.get_args(annotation) if a is not type(None))


def _scalar_type(annotation: Any) -> type | None:
    """``int`` for ``int``/``int | None`` fields (so argparse rejects ``--min-elo x`` itself)."""
    for kind in (int, float):
        if annotation is kind or (kind in typing.get_args(annotation) and _is_optional(annotation)):
            return kind
    return None


def _metavar(annotation: Any, name: str) -> str:
    """``N`` for ints, ``X`` for floats (also as list/tuple items), else the name in capitals."""
    for kind, label in ((int, "N"), (float, "X")):
        if annotation is kind or kind in typing.get_args(annotation):
            return label
    for arg in typing.get_args(annotation):
        if arg is not type(None) and typing.get_origin(arg) is None and arg in (int, float):
            return "N" if arg is int else "X"
    return name.upper()


# ---------------------------------------------------------------------------------------------
# params for tracking

_SECRET_KEY = re.compile(r"(secret|token|password|passwd|credential|access_key|api_key|private_key)", re.I)
_URI_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)


def redact(key: str, value: Any) -> Any:
    """Hide secrets: keys that name one, and credentials inside URIs.

    >>> redact("tracking.uri", "http://user:pw@host:5000")
    'http://***@host:5000'
    >>> redact("s3.secret_access_key", "abc")
    '***'
    """
    if _SECRET_KEY.search(key):
        return "***"
    if isinstance(value, str):
        return _URI_USERINFO.sub(r"\1***@", value)
    return value


def flatten(config: BaseModel | Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"prepare.min_elo": 0, ...}`` with secrets redacted: the params a run logs."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else dict(config)
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, prefix=f"{full}."))
        elif isinstance(value, list):
            out[full] = [redact(full, item) for item in value]
        else:
            out[full] = redact(full, value)
    return out
