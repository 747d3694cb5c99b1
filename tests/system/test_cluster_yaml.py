"""ray-cluster.yaml against the schema that ships with Ray, and docker/Dockerfile against the project.

Nothing here starts a cluster or builds an image: the autoscaler's own schema
(``ray/autoscaler/ray-schema.json``) and its own ``prepare_config``/``validate_config`` are the
judges, so a key Ray would reject at ``ray up`` time fails here first.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_YAML = ROOT / "ray-cluster.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SCHEMA_PATH = Path(ray.autoscaler.__file__).parent / "ray-schema.json"


@pytest.fixture(scope="module")
def config() -> dict:
    with CLUSTER_YAML.open() as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: jsonschema.Draft7Validator, config: dict) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(config)
    ]


def dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, one string each: comments dropped, continuations joined."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [" ".join(ln.split()) for ln in joined.splitlines() if ln.strip()]


def start_command(commands: list[str], needle: str) -> str:
    matches = [c for c in commands if needle in c]
    assert len(matches) == 1, f"expected one command with {needle!r} in {commands}"
    return matches[0]


# --- the config against Ray's schema ---------------------------------------------------------


def test_schema_ships_with_ray():
    assert SCHEMA_PATH.is_file(), SCHEMA_PATH


def test_config_is_valid_against_rays_schema(config, validator):
    assert schema_errors(validator, config) == []


def test_config_passes_rays_own_validation(config):
    # What `ray up` does before it touches AWS: fill in the provider's defaults, then validate
    # (schema plus cross-field checks such as head_node_type being a declared node type).
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(config)))


def test_node_types(config):
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    workers = {name: t for name, t in types.items() if name != config["head_node_type"]}
    for name, t in workers.items():
        assert 0 <= t.get("min_workers", 0) <= t["max_workers"], name
    assert sum(t["max_workers"] for t in workers.values()) <= config["max_workers"]
    # The head runs the drivers and advertises no CPUs: engines, learners and Ray Data tasks go to
    # the workers the autoscaler starts, never beside the drivers.
    assert types[config["head_node_type"]]["resources"] == {"CPU": 0}
    assert any(t["resources"].get("GPU", 0) > 0 for t in workers.values()), "no GPU node type"
    assert config["provider"]["type"] == "aws"


def test_each_node_type_has_its_own_least_privilege_instance_profile(config):
    """The head's profile (the autoscaler's EC2 calls) is not the workers' (S3 and ECR only), and
    no node runs as ray-autoscaler-v1, the EC2-and-S3-full-access role `ray up` makes by default."""
    types = config["available_node_types"]
    profile = {name: t["node_config"]["IamInstanceProfile"]["Arn"] for name, t in types.items()}
    assert profile.pop(config["head_node_type"]).endswith(":instance-profile/chess-rl-head")
    assert profile and all(arn.endswith(":instance-profile/chess-rl-worker") for arn in profile.values())
    docs = (ROOT / "docs" / "cluster.md").read_text()
    assert "chess-rl-head" in docs and "chess-rl-worker" in docs and "iam:PassRole" in docs


def test_docker_image(config):
    docker = config["docker"]
    assert re.fullmatch(r"\S+/chess-rl:[\w.-]+", docker["image"]), docker["image"]
    assert docker["container_name"]
    assert isinstance(docker["run_options"], list)
    gpu_types = [t for t in config["available_node_types"].values() if t["resources"].get("GPU", 0) > 0]
    for t in gpu_types:
        assert t["docker"]["worker_image"].endswith("-gpu"), "GPU nodes need the -gpu build"


def test_dashboard_stays_on_loopback(config):
    head = start_command(config["head_start_ray_commands"], "ray start --head")
    assert "--dashboard-host=127.0.0.1" in head
    assert "0.0.0.0" not in " ".join(config["head_start_ray_commands"])


def test_token_auth_on_every_node(config):
    # Ray 2.60 turns token auth on by default only for local ray.init() clusters; `ray start`
    # needs RAY_AUTH_MODE=token, and each node needs the same token.
    head = start_command(config["head_start_ray_commands"], "ray start --head")
    worker = start_command(config["worker_start_ray_commands"], "ray start --address")
    for command in (head, worker):
        assert "RAY_AUTH_MODE=token" in command
        assert command.index("RAY_AUTH_MODE=token") < command.index("ray start")
    assert "~/.ray/auth_token" in config["file_mounts"]


def test_no_secrets_in_config():
    text = CLUSTER_YAML.read_text()
    assert not re.search(r"AKIA[0-9A-Z]{16}", text)
    assert "aws_secret_access_key" not in text.lower()
    assert "RAY_AUTH_TOKEN=" not in text


# --- deliberately broken copies must fail -----------------------------------------------------


def _unknown_top_level_key(c):
    c["workers"] = 3


def _max_workers_not_a_number(c):
    c["max_workers"] = "lots"


def _fractional_resource(c):
    next(iter(c["available_node_types"].values()))["resources"]["CPU"] = 0.5


def _image_key_in_a_node_type(c):
    # A node type may override worker_image only; `image` there is a typo Ray rejects.
    next(iter(c["available_node_types"].values()))["docker"] = {"image": "chess-rl:latest"}


def _start_commands_as_a_string(c):
    c["head_start_ray_commands"] = "ray start --head"


@pytest.mark.parametrize(
    "breaks",
    [
        _unknown_top_level_key,
        _max_workers_not_a_number,
        _fractional_resource,
        _image_key_in_a_node_type,
        _start_commands_as_a_string,
    ],
)
def test_broken_config_fails_the_schema(config, validator, breaks):
    broken = copy.deepcopy(config)
    breaks(broken)
    assert schema_errors(validator, broken), f"{breaks.__name__} passed Ray's schema"


def test_unknown_head_node_type_fails_rays_validation(config):
    # The schema alone accepts this; Ray's cross-field check does not.
    from ray.autoscaler._private.util import prepare_config, validate_config

    broken = copy.deepcopy(config)
    broken["head_node_type"] = "no_such_type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(prepare_config(broken))


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_base_matches_pinned_ray():
    pinned = re.search(r"^ray==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned, "constraints.txt pins no ray"
    text = "\n".join(dockerfile_instructions())
    bases = re.findall(r"rayproject/ray:(\S+)", text)
    assert bases, "no rayproject/ray base image"
    assert all(tag == f"{pinned.group(1)}-py311" for tag in bases), (bases, pinned.group(1))
    assert re.search(r"^FROM (\$\{?BASE_IMAGE\}?|rayproject/ray:\S+)$", text, re.M), (
        "no FROM of the Ray image"
    )


def test_dockerfile_installs_stockfish():
    instructions = dockerfile_instructions()
    # The package names given to `apt-get install`, up to the end of that shell command.
    apt_packages = [
        word
        for i in instructions
        if i.startswith("RUN ")
        for args in re.findall(r"apt-get install((?:\s+[^\s&;|]+)*)", i)
        for word in args.split()
        if not word.startswith("-")
    ]
    assert "stockfish" in apt_packages, apt_packages
    assert "ENV STOCKFISH_PATH=/usr/games/stockfish" in instructions


def test_dockerfile_installs_the_project_with_constraints():
    instructions = dockerfile_instructions()
    copied = " ".join(i for i in instructions if i.startswith("COPY "))
    packages = ["chessrl", "cluster", "actors", "pipelines", "configs"]
    for name in ["pyproject.toml", "constraints.txt", *packages]:
        assert re.search(rf"\s{re.escape(name)}\s", copied + " "), f"{name} is not copied into the image"
    assert any(
        i.startswith("RUN ") and re.search(r"pip install (\S+ )*-c constraints\.txt (\S+ )*\.(\s|$)", i)
        for i in instructions
    ), "no `pip install -c constraints.txt .`"


def test_dockerignore_keeps_the_context_small():
    ignored = {ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()}
    for entry in (".git", ".venv", "runs", "mlruns"):
        assert entry in ignored, entry
