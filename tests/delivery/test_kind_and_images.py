"""The KinD cluster config, the Dockerfiles, and the make targets that need Docker.

What can be checked without Docker: the KinD config gives the task's map its
four nodes, the Dockerfiles have the shape the chart's security context
relies on, and the Docker targets stop with a message that says what is
missing. tests/images builds the images and runs them.
"""

from __future__ import annotations

import os
import re

import pytest
import yaml

from .conftest import REPO, run

pytestmark = pytest.mark.delivery

KIND_CONFIG = yaml.safe_load((REPO / "cluster" / "kind-config.yaml").read_text())
APPS = {"scheduler": "gpu-scheduler", "check": "gpu-scheduler-check"}


def test_kind_cluster_has_one_control_plane_and_four_workers():
    assert KIND_CONFIG["kind"] == "Cluster"
    assert KIND_CONFIG["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [node["role"] for node in KIND_CONFIG["nodes"]] == ["control-plane"] + ["worker"] * 4


def test_kind_workers_carry_the_alias_labels_node1_to_node4():
    workers = [n for n in KIND_CONFIG["nodes"] if n["role"] == "worker"]

    assert [w["labels"] for w in workers] == [{"gpu-node-name": f"node{i}"} for i in range(1, 5)]
    (control_plane,) = [n for n in KIND_CONFIG["nodes"] if n["role"] == "control-plane"]
    assert "labels" not in control_plane


def test_kind_nodes_run_one_kubernetes_1_37_image_pinned_by_digest():
    images = {node["image"] for node in KIND_CONFIG["nodes"]}

    (image,) = images
    assert re.fullmatch(r"kindest/node:v1\.37\.\d+@sha256:[0-9a-f]{64}", image), image


LOCAL_PATH_MANIFEST = REPO / "cluster" / "kind" / "local-path" / "local-path-storage.yaml"
LOCAL_PATH = list(yaml.safe_load_all(LOCAL_PATH_MANIFEST.read_text()))


def test_local_path_storage_is_upstream_kinds_default_class_with_every_image_the_one_kind_sh_fills_in():
    """scripts/kind.sh replaces IMAGE by the image it built and loaded: the provisioner's and
    its helper pod's (inside the ConfigMap), which runs on the node a volume is made for."""
    by_kind = {}
    for doc in LOCAL_PATH:
        by_kind.setdefault(doc["kind"], []).append(doc)
    (storage_class,) = by_kind["StorageClass"]
    (deployment,) = by_kind["Deployment"]
    (config,) = by_kind["ConfigMap"]
    (account,) = by_kind["ServiceAccount"]
    helper = yaml.safe_load(config["data"]["helperPod.yaml"])
    (container,) = deployment["spec"]["template"]["spec"]["containers"]

    assert storage_class["metadata"]["name"] == "standard"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert storage_class["provisioner"] == "rancher.io/local-path"
    assert storage_class["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert container["image"] == helper["spec"]["containers"][0]["image"] == "IMAGE"
    # The helper pods run as this account: the provisioner is told its name.
    assert f"--service-account-name={account['metadata']['name']}" in container["command"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def dockerfile(app: str) -> list[str]:
    """The Dockerfile's instructions, one string each, comments dropped."""
    text = (REPO / "apps" / app / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize(("app", "entrypoint"), APPS.items())
def test_image_runs_as_uid_1000_from_a_venv_only_final_stage(app, entrypoint):
    instructions = dockerfile(app)
    stages = [i for i in instructions if i.startswith("FROM ")]
    final = instructions[instructions.index(stages[-1]) :]

    assert len(stages) == 2, stages
    assert stages[0].endswith(" AS build")
    assert "COPY --from=build /opt/venv /opt/venv" in final
    # Only the venv comes from the build stage; no other COPY brings sources in.
    assert [i for i in final if i.startswith("COPY")] == ["COPY --from=build /opt/venv /opt/venv"]
    assert "USER 1000:1000" in final
    assert f'ENTRYPOINT ["{entrypoint}"]' in final
    env = " ".join(i for i in final if i.startswith("ENV "))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


@pytest.mark.parametrize("app", APPS)
def test_base_image_is_pinned_to_a_python_3_11_patch_release(app):
    (arg,) = [i for i in dockerfile(app) if i.startswith("ARG PYTHON_IMAGE=")]

    assert re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm", arg), arg
    assert [i for i in dockerfile(app) if i.startswith("FROM ")][-1] == "FROM ${PYTHON_IMAGE}"


def test_build_context_lets_in_only_what_the_dockerfiles_copy():
    # The context is the repository root (the wheelhouse lives in .cache):
    # .dockerignore leaves everything out, then lets in the apps' packages,
    # the installer script and the wheelhouses, never tests, caches or .git.
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]

    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {
        "!apps/scheduler/pyproject.toml",
        "!apps/scheduler/gpu_scheduler/",
        "!apps/check/pyproject.toml",
        "!apps/check/gpu_scheduler_check/",
        "!scripts/image-venv.sh",
        "!.cache/wheelhouse/scheduler/",
        "!.cache/wheelhouse/check/",
    }
    assert {"**/__pycache__", "**/*.py[cod]"} <= set(lines)


@pytest.fixture
def docker_without_daemon(tmp_path):
    """PATH where `docker` exists but its daemon does not answer, as on our machines."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    docker = fake_bin / "docker"
    docker.write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock' >&2\nexit 1\n"
    )
    docker.chmod(0o755)
    # Without CI=true: under it `make kind-up` may start a Docker engine itself
    # (scripts/docker-engine.sh), which is not what this test is about.
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    return {**env, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("target", ["kind-up", "images", "e2e"])
def test_docker_targets_stop_with_a_clear_message_without_a_docker_daemon(docker_without_daemon, target):
    result = run(["make", "--no-print-directory", target], cwd=REPO, env=docker_without_daemon)

    assert result.returncode != 0
    assert "docker is installed but its daemon does not answer" in result.stderr
    assert f"'make {target}'" in result.stderr


def test_docker_targets_are_listed_by_make_help():
    result = run(["make", "--no-print-directory", "help"], cwd=REPO)

    listed = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    assert {
        "kind-up",
        "kind-down",
        "images",
        "e2e",
        "lint-delivery",
        "test-delivery",
    } <= listed
