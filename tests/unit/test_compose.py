"""docker-compose.yml, .env.example and the Dockerfile, checked without Docker.

Docker does not run on the development machine: these read the files and check
what `docker compose up` relies on (order, health, scaling, authentication,
configuration) so a broken deployment shows up in the tests, not in production.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from theow_workers.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"

WORKERS = ("resolver", "explorer", "replay")
SERVICES = (
    "redis",
    "etcd",
    "minio",
    "milvus",
    "postgres",
    "migrate",
    *WORKERS,
    "flower",
    "metrics",
)
# ${NAME}, ${NAME:-default}, ${NAME:?error}; $$ escapes a dollar for the container's shell.
REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict[str, Any]:
    return compose["services"]


def env_example_names() -> set[str]:
    """Variables .env.example sets or documents (``NAME=`` or ``# NAME=``)."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))


def default_of(value: str) -> str:
    """What compose makes of ``${NAME:-default}`` when NAME is unset."""
    return re.sub(r"\$\{[A-Za-z0-9_]+:-([^}]*)\}", r"\1", value)


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command", [])
    return cmd.split() if isinstance(cmd, str) else list(cmd)


def test_every_role_and_store_is_a_service(services):
    assert set(SERVICES) <= set(services)


def test_every_long_running_service_has_a_health_check(services):
    for name in SERVICES:
        if name != "migrate":
            assert "test" in services[name].get("healthcheck", {}), name


def test_milvus_health_is_its_healthz_endpoint_on_9091(services):
    test = " ".join(services["milvus"]["healthcheck"]["test"])
    assert "9091" in test and "/healthz" in test


def test_services_start_in_order_with_conditions(services):
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on without conditions"
        for dependency, how in depends.items():
            assert how.get("condition") in (
                "service_healthy",
                "service_completed_successfully",
            ), f"{name} -> {dependency}"
    for name in (*WORKERS, "metrics"):
        migrate = services[name]["depends_on"]["migrate"]
        assert migrate["condition"] == "service_completed_successfully", name
    for name in WORKERS:
        for store in ("redis", "milvus"):
            assert services[name]["depends_on"][store]["condition"] == "service_healthy"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for store in ("etcd", "minio"):
        assert services["milvus"]["depends_on"][store]["condition"] == "service_healthy"


def test_migrate_runs_once_and_workers_run_the_theow_commands(services):
    assert command(services["migrate"]) == ["theow", "db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    assert command(services["resolver"])[:4] == ["theow", "worker", "--queues", "resolve"]
    # The replay worker also learns passing runs: both are sampled, low-priority work.
    assert command(services["replay"])[:4] == ["theow", "worker", "--queues", "replay,passing"]
    explorer = command(services["explorer"])
    assert explorer[:4] == ["theow", "worker", "--queues", "explore"]
    assert explorer[explorer.index("--concurrency") + 1] == "1"
    assert services["explorer"]["environment"]["THEOW_EXPLORE"] == "1"
    assert "THEOW_EXPLORE" not in services["resolver"]["environment"]


def test_worker_roles_scale_with_distinct_names_and_a_long_enough_stop(services):
    for name in WORKERS:
        service = services[name]
        assert "container_name" not in service, name
        assert "ports" not in service, name
        assert service["environment"]["CELERY_WORKER_HOSTNAME"] == f"{name}@%h"
        assert service["init"] is True  # SIGTERM reaches the worker; pool processes are reaped
        grace = int(str(service["stop_grace_period"]).removesuffix("s"))
        limit = (
            Settings().explore_time_limit if name == "explorer" else Settings().resolve_time_limit
        )
        assert grace > limit, f"{name}: docker would SIGKILL a draining worker"


def test_no_service_has_a_fixed_container_name(services):
    assert not [name for name, s in services.items() if "container_name" in s]


def test_redis_never_evicts_and_persists(services):
    redis_cmd = command(services["redis"])
    assert redis_cmd[redis_cmd.index("--maxmemory-policy") + 1] == "noeviction"
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"


def test_state_lives_in_named_volumes(compose, services):
    declared = set(compose["volumes"])
    for name, path in (
        ("redis", "/data"),
        ("etcd", "/etcd"),
        ("minio", "/minio_data"),
        ("milvus", "/var/lib/milvus"),
        ("postgres", "/var/lib/postgresql/data"),
    ):
        (volume,) = [v for v in services[name]["volumes"] if v.endswith(f":{path}")]
        assert volume.split(":")[0] in declared, name


def test_every_image_is_pinned(services):
    for name, service in services.items():
        image = default_of(service["image"])
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image}"


def test_milvus_server_matches_the_installed_pymilvus_major():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    tag = services["milvus"]["image"].rpartition(":")[2]
    assert services["milvus"]["image"].startswith("milvusdb/milvus:")
    assert tag.lstrip("v").split(".")[0] == version("pymilvus").split(".")[0]


def test_every_theow_variable_in_compose_and_env_example_is_a_setting():
    known = set(Settings.env_names())
    used = set(REFERENCE.findall(COMPOSE.read_text()))
    for service in yaml.safe_load(COMPOSE.read_text())["services"].values():
        environment = service.get("environment", {})
        used |= set(environment) if isinstance(environment, dict) else set()
    theow = {n for n in used | env_example_names() if n.startswith("THEOW_")}
    assert theow - known == set()


def test_every_setting_and_every_compose_variable_is_in_env_example():
    listed = env_example_names()
    assert set(Settings.env_names()) - listed == set()
    assert set(REFERENCE.findall(COMPOSE.read_text())) - listed == set()


def test_flower_requires_a_password_and_is_never_open(services):
    flower = services["flower"]
    assert command(flower)[:3] == ["python", "-m", "theow_workers.ops.flower"]
    password = flower["environment"]["THEOW_FLOWER_PASSWORD"]
    assert re.fullmatch(
        r"\$\{THEOW_FLOWER_PASSWORD:\?[^}]+\}", password
    )  # compose refuses if unset
    for text in (COMPOSE.read_text(), ENV_EXAMPLE.read_text()):
        assert "FLOWER_UNAUTHENTICATED_API" not in text
        assert "--basic-auth" not in text and "--basic_auth" not in text  # not in `ps`


def test_the_web_console_requires_a_password_like_flower(services):
    web = services["web"]
    assert command(web)[:2] == ["theow", "web"]
    assert re.fullmatch(
        r"\$\{THEOW_WEB_PASSWORD:\?[^}]+\}", web["environment"]["THEOW_WEB_PASSWORD"]
    )
    assert re.search(r"^THEOW_WEB_PASSWORD=$", ENV_EXAMPLE.read_text(), re.M)
    assert "healthz" in " ".join(web["healthcheck"]["test"])


def test_the_data_stores_require_passwords(services):
    assert ":?" in services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert ":?" in services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]
    # Redis takes its admin password from the environment into its ACL file at each start.
    redis = services["redis"]
    assert ":?" in redis["environment"]["REDISCLI_AUTH"]
    assert "--aclfile" in command(redis)
    assert "REDISCLI_AUTH" in " ".join(redis["entrypoint"])
    for name in ("REDIS_PASSWORD", "POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD"):
        assert re.search(rf"^{name}=$", ENV_EXAMPLE.read_text(), re.M), f"{name} must be empty"


def test_published_ports_default_to_loopback(services):
    for name, service in services.items():
        for port in service.get("ports", []):
            assert default_of(port).startswith("127.0.0.1:"), f"{name}: {port}"


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_dockerfile_uses_python_311_slim_and_cpu_torch_2_13():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = [arg for kind, arg in instructions if kind == "RUN"]
    (torch,) = [r for r in runs if "torch" in r]
    assert "torch==2.13.0" in torch
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch
    install = next(i for i, r in enumerate(runs) if "[workers]" in r)
    assert runs.index(torch) < install  # torch first, or the extra pulls a CUDA build


def test_dockerfile_runs_as_a_non_root_user_offline():
    instructions = dockerfile_instructions()
    users = [(i, arg) for i, (kind, arg) in enumerate(instructions) if kind == "USER"]
    assert users, "no USER: the workers would run as root"
    last_index, user = users[-1]
    assert user not in ("root", "0") and not user.startswith("0:")
    last_run = max(i for i, (kind, _) in enumerate(instructions) if kind == "RUN")
    assert last_index > last_run
    env = " ".join(arg for kind, arg in instructions if kind == "ENV")
    assert re.search(r"\bHF_HUB_OFFLINE=1\b", env)


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_image():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".venv", ".theow", ".git"} <= ignored


def test_every_long_running_service_is_restarted_when_it_exits(services):
    for name, service in services.items():
        if name in ("migrate", "cli"):  # one shots
            assert service["restart"] == "no", name
        else:
            assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name
            assert "test" in service.get("healthcheck", {}), name
