"""The Dockerfile and docker-compose.yml are checked without a Docker engine: they parse, every
service the issue asks for exists with a healthcheck, only the API port is published, and every
command they run exists (``sodm`` subcommands in our CLI, other programs in their own images).
The hashed locks in requirements/ cover every dependency pyproject.toml declares."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
# Programs that come with the third-party images the compose file uses.
IMAGE_PROGRAMS = {"postgres": {"pg_isready"}, "redis": {"redis-server", "redis-cli"},
                  "minio": {"minio", "mc"}}


def _sodm_subcommands() -> set[str]:
    parser = build_parser()
    subs: set[str] = set()
    for action in parser._actions:  # argparse has no public accessor for subparsers
        if isinstance(action, argparse._SubParsersAction):
            subs.update(action.choices)
    return subs


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _dockerfile_lines() -> list[str]:
    return [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()]


def _check_command(argv: list[str], service: str, subs: set[str]) -> None:
    program = argv[0]
    if program == "sodm":
        assert argv[1] in subs, f"{service}: `sodm {argv[1]}` is not a CLI subcommand"
    elif program == "CMD":
        _check_command(argv[1:], service, subs)
    elif program == "curl":
        assert any(a.startswith("http://127.0.0.1:8000/") for a in argv), argv
    else:
        assert program in IMAGE_PROGRAMS.get(service, set()), f"{service}: unknown {program}"


def test_compose_has_every_service_with_healthchecks() -> None:
    services = _compose()["services"]
    assert {"api", "worker", "migrate", "postgres", "redis", "minio",
            "spark-connect"} <= set(services)
    for name, svc in services.items():
        if name != "migrate":
            assert "healthcheck" in svc, f"{name} has no healthcheck"
    assert services["migrate"]["command"] == ["sodm", "migrate"]


def test_only_the_api_port_is_published() -> None:
    services = _compose()["services"]
    published = {name for name, svc in services.items() if svc.get("ports")}
    assert published == {"api"}
    assert services["api"]["ports"] == ["8000:8000"]


def test_every_compose_command_exists() -> None:
    subs = _sodm_subcommands()
    for name, svc in _compose()["services"].items():
        if "command" in svc:
            _check_command(list(svc["command"]), name, subs)
        if "healthcheck" in svc:
            _check_command(list(svc["healthcheck"]["test"]), name, subs)


def test_compose_services_use_the_real_stack_settings() -> None:
    services = _compose()["services"]
    for name in ("api", "worker", "migrate"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgresql")
        assert env["CELERY_BROKER_URL"].startswith("redis://")
    env = services["worker"]["environment"]
    # Connect unless the operator empties SODM_SPARK_REMOTE and names the standalone master
    assert env["SODM_SPARK_REMOTE"] == "${SODM_SPARK_REMOTE-sc://spark-connect:15002}"
    assert env["SODM_SPARK_MASTER"] == "${SODM_SPARK_MASTER:-}"


def test_compose_offers_a_standalone_cluster() -> None:
    """A master and two workers of the one image (profile spark-cluster) next to Connect;
    the workers register with the master by its service name and hold the bucket's keys
    (their executors read datasets from it)."""
    services = _compose()["services"]
    master = services["spark-master"]
    assert master["command"][:2] == ["sodm", "spark-master"]
    assert master["command"][master["command"].index("--port") + 1] == "7077"
    workers = [services[f"spark-worker-{i}"] for i in (1, 2)]
    for w in workers:
        assert w["command"][:3] == ["sodm", "spark-worker", "spark://spark-master:7077"]
        assert w["build"] == master["build"] == services["spark-connect"]["build"] == "."
        assert _required(w["environment"]["AWS_SECRET_ACCESS_KEY"], "S3_SECRET_KEY")
        assert w["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert {*master["profiles"], *workers[0]["profiles"]} == {"spark-cluster"}
    assert "profiles" not in services["spark-connect"]


def _required(value: str, var: str) -> bool:
    """``value`` takes ``var`` from the environment with no default (``${VAR:?message}``)."""
    return re.search(r"\$\{" + var + r":\?[^}]*\}", value) is not None


def _default_of(value: str, var: str) -> str:
    m = re.fullmatch(r"\$\{" + var + r":-([^}]*)\}", value)
    assert m, f"{value!r} is not ${{{var}:-default}}"
    return m.group(1)


def test_compose_passwords_come_from_the_environment_without_defaults() -> None:
    """No password is written in the file: Postgres and Redis take theirs from the
    environment and refuse to start without them; Redis requires its password."""
    text = (ROOT / "docker-compose.yml").read_text()
    services = _compose()["services"]
    assert _required(services["postgres"]["environment"]["POSTGRES_PASSWORD"],
                     "POSTGRES_PASSWORD")
    redis_cmd = services["redis"]["command"]
    assert _required(redis_cmd[redis_cmd.index("--requirepass") + 1], "REDIS_PASSWORD")
    assert _required(services["redis"]["environment"]["REDISCLI_AUTH"], "REDIS_PASSWORD")
    for name in ("api", "worker", "migrate"):
        env = services[name]["environment"]
        assert _required(env["DATABASE_URL"], "POSTGRES_PASSWORD")
        assert _required(env["CELERY_BROKER_URL"], "REDIS_PASSWORD")
        assert _required(env["AWS_SECRET_ACCESS_KEY"], "S3_SECRET_KEY")
    assert _required(services["minio"]["environment"]["MINIO_ROOT_PASSWORD"], "S3_SECRET_KEY")
    assert not re.search(r"(PASSWORD|requirepass)\W+\S*:-", text), "a password default"
    assert "sodm:sodm@" not in text


def test_api_and_worker_restart_and_have_memory_limits() -> None:
    """api and worker come back after a crash and are capped; a training job's own limit
    (SODM_JOB_MEMORY_LIMIT_MB) stays below the worker's cap, so the job fails alone."""
    services = _compose()["services"]
    for name in ("api", "worker", "postgres", "redis", "spark-connect"):
        assert services[name].get("restart") in ("always", "unless-stopped"), name
    sizes = {"g": 1024, "m": 1}
    limits = {}
    for name, var in (("api", "API_MEMORY"), ("worker", "WORKER_MEMORY")):
        default = _default_of(services[name]["mem_limit"], var)
        limits[name] = int(default[:-1]) * sizes[default[-1]]
    job_mb = int(_default_of(services["worker"]["environment"]["SODM_JOB_MEMORY_LIMIT_MB"],
                             "SODM_JOB_MEMORY_LIMIT_MB"))
    assert 0 < job_mb < limits["worker"]


def test_backends_are_on_the_internal_network_only() -> None:
    """Postgres, Redis, Spark Connect (and the worker) sit on an internal-only network
    with no published port; only the API joins the public network."""
    compose = _compose()
    assert compose["networks"]["internal"]["internal"] is True
    services = compose["services"]
    for name in ("postgres", "redis", "minio", "spark-connect", "worker", "migrate"):
        assert services[name]["networks"] == ["internal"], name
        assert "ports" not in services[name] and "expose" not in services[name], name
    assert set(services["api"]["networks"]) == {"internal", "public"}
    assert "15002" in services["spark-connect"]["command"]


def test_no_data_volume_is_shared() -> None:
    """Models are in Postgres and datasets and results in the bucket (SODM_STORAGE_URL,
    MinIO by default): api, worker and the Spark services mount no data volume (the api
    and worker share only their Prometheus samples), so each can run on a host of its own."""
    services = _compose()["services"]
    for name in ("api", "worker", "spark-connect", "spark-master", "spark-worker-1",
                 "spark-worker-2"):
        assert set(services[name].get("volumes", [])) <= {"metrics:/metrics"}, name
    for name in ("api", "worker", "migrate"):
        url = _default_of(services[name]["environment"]["SODM_STORAGE_URL"], "SODM_STORAGE_URL")
        assert url.startswith("s3://") and "endpoint_override=minio:9000" in url
    assert services["migrate"]["depends_on"]["minio"]["condition"] == "service_healthy"


def test_dockerfile_copies_existing_paths_and_runs_cli() -> None:
    subs = _sodm_subcommands()
    lines = _dockerfile_lines()
    assert lines[0].startswith("# ") or any(ln.startswith("FROM python:3.11") for ln in lines)
    for ln in lines:
        if ln.startswith("COPY "):
            for src in shlex.split(ln)[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
        if ln.startswith("CMD "):  # exec form (JSON) or shell form (HEALTHCHECK continuation)
            rest = ln[len("CMD ") :]
            argv = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            _check_command(argv, "api", subs)
    assert any("openjdk-17" in ln for ln in lines), "Spark needs Java 17 in the image"


def _locked(lock: str) -> dict[str, list[tuple[str, str]]]:
    """name -> [(version, environment marker)] of a hashed lock in requirements/."""
    pins: dict[str, list[tuple[str, str]]] = {}
    text = (ROOT / "requirements" / f"{lock}.txt").read_text()
    for entry in text.replace("\\\n", " ").splitlines():
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        req, _, hashes = entry.partition("--hash=")
        assert hashes, f"{lock}.txt: {req.strip()} has no hash"
        spec, _, marker = req.partition(";")
        name, _, version = spec.strip().partition("==")
        assert version, f"{lock}.txt: {spec.strip()} is not an exact pin"
        pins.setdefault(canonicalize_name(name), []).append((version.strip(), marker.strip()))
    return pins


@pytest.mark.parametrize("extra", ["service", "spark", "image", "dev"])
def test_every_declared_dependency_is_locked_within_its_range(extra: str) -> None:
    """Each dependency of pyproject.toml (the base ones and the extra's, through the extras it
    names) is pinned with hashes in requirements/<extra>.txt at a version its range allows:
    a dependency added without `make lock` fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = _locked(extra)
    todo, seen = [extra], set()
    reqs = [Requirement(r) for r in project["dependencies"]]
    while todo:
        name = todo.pop()
        seen.add(name)
        for r in map(Requirement, extras[name]):
            if canonicalize_name(r.name) == "sodm":
                todo += [e for e in r.extras if e not in seen]
            else:
                reqs.append(r)
    for r in reqs:
        name = canonicalize_name(r.name)
        assert name in pins, f"{r} is not in requirements/{extra}.txt: run make lock"
        for version, _marker in pins[name]:
            assert r.specifier.contains(version, prereleases=True), \
                f"requirements/{extra}.txt pins {name}=={version}, outside {r.specifier}"


def test_make_ci_and_docker_install_from_the_hashed_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements/$*.txt" in makefile
    assert "--no-deps -e ." in makefile
    docker = (ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes -r requirements/image.txt" in docker
    assert "pip install --no-deps ." in docker
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


def test_the_example_dataset_is_the_public_heart_scale() -> None:
    """examples/heart_scale (the README's data) is the shared copy, with its licence."""
    import hashlib
    import lzma

    data = (ROOT / "examples" / "heart_scale").read_bytes()
    shared = ROOT.parent / "shared" / "datasets" / "heart_scale.xz"
    assert data == lzma.decompress(shared.read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    notes = (ROOT / "examples" / "README.md").read_text()
    assert digest in notes and "CC BY 4.0" in notes
    assert "Redistribution and use" in (ROOT / "examples" / "LICENSE-libsvm").read_text()
    assert "examples/heart_scale" in (ROOT / "README.md").read_text()
