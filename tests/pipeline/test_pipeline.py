"""`make pipeline`: a release tag's pipeline (.gitlab-ci.yml by gitlab-ci-local) on real parts of this machine.

Every claim is read from a record the pipeline's own scripts did not write:
gitlab-ci-local's output (its job lines and summary), pytest's JUnit reports,
the registry's HTTP API and access log, the KinD nodes' containerd and the
pods' status, Argo CD's Applications and Events. What our scripts print (a
job's log lines, the echo of its commands) is never the oracle.
"""

from __future__ import annotations

import base64
import json
import os
import re
import xml.etree.ElementTree as ElementTree

import pytest

from .conftest import (
    ARCHES,
    CLUSTER,
    COSIGN,
    IMAGES,
    JUNIT_DIR,
    PIPELINE_DIR,
    PIPELINE_TIMEOUT,
    REGISTRY,
    REGISTRY_IMAGE,
    SAMPLE,
    junit_outcomes,
    junit_reports,
    line_of,
    marked_tests,
    run,
    summary,
)

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(PIPELINE_TIMEOUT + 600)]

STAGES = ["lint", "test", "build", "e2e", "release", "deploy"]
# What a release tag's pipeline runs before its manual deploy.
PIPELINE_JOBS = [
    "lint",
    "release-check",
    "test-unit",
    "test-cluster",
    "test-compat",
    "build-image",
    "e2e-kind",
    "promote",
    "sign",
    "publish-charts",
    "gitlab-release",
]
TEST_JOBS_WITH_PYTEST = ["test-unit", "test-cluster", "test-compat", "e2e-kind"]
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
# Whatever a tag names: an index (what build-image pushes) or a single image (what it must not).
ANY_MANIFEST = f"{INDEX_TYPE}, application/vnd.docker.distribution.manifest.list.v2+json, {MANIFEST_TYPES}"
# gitlab-ci-local --timestamps: "[HH:MM:SS duration] job  starting shell (stage)".
STARTED = re.compile(r"^\[[^\]]*\] (\S+)\s+starting (\S+) \((\w+)\)$", re.M)
# The registry's access log (combined format): address, method, repository,
# manifest reference, status, user agent. containerd adds ?ns=<registry host>
# to what it asks a mirror.
ACCESS = re.compile(
    r'^(\S+) - - \[[^\]]*\] "(GET|HEAD) /v2/([^ ]+)/manifests/([^ ?]+)\S* HTTP/[\d.]+" (\d+) \S+ "[^"]*" "([^"]*)"$',
    re.M,
)


def passed_files(job: str) -> set[str]:
    """The test files of which `job`'s JUnit reports hold a passed test, as pytest names them in
    a report's classname (tests/e2e/test_x.py: tests.e2e.test_x)."""
    found = set()
    for path in sorted(JUNIT_DIR.glob(f"{job}-*.xml")):
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            if not any(case.find(outcome) is not None for outcome in ("failure", "error", "skipped")):
                found.add(re.sub(r"\.Test\w+$", "", case.get("classname", "")))
    return found


def test_every_job_ran_in_the_shell_executor_and_passed_in_stage_order(pipeline):
    started = STARTED.findall(pipeline.log)

    assert sorted(job for job, _, _ in started) == sorted(PIPELINE_JOBS), started
    # No job image can be pulled here: the shell executor ran each one.
    assert {executor for _, executor, _ in started} == {"shell"}, started
    stages = [STAGES.index(stage) for _, _, stage in started]
    assert stages == sorted(stages), started
    assert summary(pipeline.log) == dict.fromkeys(PIPELINE_JOBS, "PASS"), pipeline.log[-3000:]
    # The manual deploy ran only when asked, on its own, after the rest.
    assert STARTED.findall(pipeline.deploy_log) == [("deploy", "shell", "deploy")]
    assert summary(pipeline.deploy_log) == {"deploy": "PASS"}, pipeline.deploy_log[-3000:]


def test_each_test_job_ran_the_sample_of_its_suites_and_it_passed(pipeline):
    """TEST_SELECTION=pipeline_sample: every suite passed earlier in the same `make test`; each
    test job proves it runs its suites by running the marked tests of them, and nothing else."""
    sample = marked_tests(SAMPLE)
    outcomes = {job: junit_outcomes(job) for job in TEST_JOBS_WITH_PYTEST}

    for job, ran in outcomes.items():
        assert ran, f"{job}: no test in its JUnit reports"
        assert set(ran) <= sample, f"{job} ran tests outside the selection: {set(ran) - sample}"
        assert set(ran.values()) == {"passed"}, f"{job}: {ran}"
    # The sample of each suite, in the job that runs the suite.
    unit = {
        "test_task_map_parses_to_the_task_placement",
        "test_once_prints_node_devices_and_match_when_placement_is_right",
    }
    assert unit <= set(outcomes["test-unit"]), outcomes["test-unit"]
    # Each suite of the local control plane passed a test there (a cluster test cannot pass
    # without the cluster: under CI=true it fails).
    cluster = passed_files("test-cluster")
    for suite in ("tests.faults.test_", "tests.e2e.test_", "apps.scheduler.tests.test_"):
        assert any(name.startswith(suite) for name in cluster), f"test-cluster passed nothing of {suite}*: {cluster}"
    # The 1.35 control plane ran the sample's compat tests (marked both), and only those.
    assert set(outcomes["test-compat"]) <= marked_tests("compat"), outcomes["test-compat"]
    assert (
        "test_check_statefulset_pods_run_on_the_mapped_nodes_with_their_devices_in_every_container"
        in outcomes["e2e-kind"]
    )


def test_the_release_started_after_every_test_job_passed(pipeline):
    promote = line_of(pipeline.log, "promote", "starting")
    # Every job gitlab-ci-local started in a stage before the release's, whatever its name.
    before = [job for job, _, stage in STARTED.findall(pipeline.log) if STAGES.index(stage) < STAGES.index("release")]

    assert set(before) >= set(TEST_JOBS_WITH_PYTEST), before
    for needed in before:
        assert line_of(pipeline.log, needed, "finished in") < promote, f"promote started before {needed} finished"
    assert line_of(pipeline.log, "promote", "finished in") < line_of(pipeline.log, "publish-charts", "starting")
    assert line_of(pipeline.log, "promote", "finished in") < line_of(pipeline.log, "sign", "starting")
    assert line_of(pipeline.log, "sign", "finished in") < line_of(pipeline.log, "gitlab-release", "starting")
    assert line_of(pipeline.log, "publish-charts", "finished in") < line_of(pipeline.log, "gitlab-release", "starting")


def test_registry_holds_both_images_under_the_commit_tag_and_the_release_tags_of_one_digest(pipeline):
    _, catalog = pipeline.registry("/v2/_catalog")

    assert sorted(catalog["repositories"]) == sorted(
        [f"gpu-scheduler/{image}" for image in IMAGES] + [f"gpu-scheduler/charts/{image}" for image in IMAGES]
    )
    for image in IMAGES:
        _, tags = pipeline.registry(f"/v2/gpu-scheduler/{image}/tags/list")
        tested = digest_of(pipeline, image)
        platforms = platform_digests(pipeline, image)
        # The index's tags, each platform image's own (build-image's), and the tag under which
        # cosign keeps what refers to a digest (signatures of the index and of each image, each
        # image's SBOM) on a registry without the OCI referrers API, as Debian's 2.8 is.
        referrers = {"sha256-" + digest.removeprefix("sha256:") for digest in [tested, *platforms.values()]}
        per_platform = {f"{pipeline.commit}-{arch}" for arch in ARCHES}
        assert sorted(tags["tags"]) == sorted(
            {pipeline.commit, pipeline.tag, pipeline.version} | per_platform | referrers
        ), tags
        for tag in (pipeline.tag, pipeline.version):
            assert digest_of(pipeline, image, tag) == tested, f"{image}:{tag} is not the digest of :{pipeline.commit}"


def test_the_release_tag_is_an_index_of_an_amd64_and_an_arm64_image_whose_configs_say_so(pipeline):
    for image in IMAGES:
        _, index = pipeline.registry(f"/v2/gpu-scheduler/{image}/manifests/{pipeline.version}", accept=ANY_MANIFEST)
        assert index.get("mediaType") == INDEX_TYPE, f"{image}:{pipeline.version} is {index.get('mediaType')}"
        listed = [platform_of(entry["platform"]) for entry in index["manifests"]]
        assert sorted(listed) == [f"linux/{arch}" for arch in ARCHES], f"{image}: {listed}"
        for entry in index["manifests"]:
            config = config_of(pipeline, image, entry["digest"])
            # Docker 20.10 writes the build machine's platform here for an arm64 build:
            # publish-images.sh must have set it right.
            assert platform_of(config) == platform_of(entry["platform"]), f"{image}@{entry['digest']}: {config}"
        # build-image's tag of each platform names the image the index lists for it.
        for arch, digest in platform_digests(pipeline, image).items():
            assert digest_of(pipeline, image, f"{pipeline.commit}-{arch}") == digest, f"{image} {arch}"


def test_the_arm64_images_are_aarch64_and_run_under_qemu(pipeline):
    """Docker on this amd64 machine runs the arm64 image the index lists (binfmt's QEMU): its
    kernel, as the image's programs see it, and its venv's Python say aarch64, and the
    command runs. No arm64 cluster runs here: this is all that is proven of arm64."""
    commands = {
        "gpu-scheduler": ["gpu-scheduler", "--version"],
        "gpu-scheduler-check": ["gpu-scheduler-check", "--help"],
    }
    for image, command in commands.items():
        ref = f"{REGISTRY_IMAGE}/{image}@{platform_digests(pipeline, image)['arm64']}"
        try:
            machine = docker_run(ref, "uname", "-m")
            assert machine.returncode == 0 and machine.stdout.strip() == "aarch64", (machine.stdout, machine.stderr)
            python = docker_run(ref, "/opt/venv/bin/python", "-c", "import platform; print(platform.machine())")
            assert python.returncode == 0 and python.stdout.strip() == "aarch64", (python.stdout, python.stderr)
            ran = docker_run(ref, *command)
            assert ran.returncode == 0, ran.stderr
            if image == "gpu-scheduler":
                assert pipeline.version in ran.stdout, ran.stdout
        finally:
            run(["docker", "rmi", ref])


def docker_run(ref: str, entrypoint: str, *args: str):
    return run(
        [
            "docker",
            "run",
            "--rm",
            "--platform",
            "linux/arm64",
            "--network",
            "none",
            "--entrypoint",
            entrypoint,
            ref,
            *args,
        ],
        timeout=300,
    )


def cosign(*args: str, **kwargs):
    """The cosign the pipeline's sign job ran (scripts/signing-tools.sh linked it), against the
    pipeline's registry (plain HTTP); no transparency log was written, so none is checked."""
    return run([COSIGN, *args, "--insecure-ignore-tlog", "--allow-http-registry"], timeout=120, **kwargs)


# Python packages each image must list in its SBOM: the app and its direct dependencies.
SBOM_PYTHON_PACKAGES = {
    "gpu-scheduler": {"gpu-scheduler", "kubernetes", "flask", "granian", "cryptography", "nvidia-ml-py"},
    "gpu-scheduler-check": {"gpu-scheduler-check", "nvidia-ml-py"},
}


def test_release_images_verify_with_the_projects_key_and_carry_an_sbom_of_their_python_packages(pipeline, tmp_path):
    """cosign itself, not the job's log, says the signature and the attestation hold: it reads
    them back from the registry and checks them with the public key of the run's key pair.
    Another key must not verify them, or the check proves nothing."""
    key = PIPELINE_DIR / "cosign" / "cosign.pub"
    other = run([COSIGN, "generate-key-pair"], cwd=tmp_path, env={**os.environ, "COSIGN_PASSWORD": "other"})
    assert other.returncode == 0, other.stderr

    for image, wanted in SBOM_PYTHON_PACKAGES.items():
        # The index the release tag names, and each platform's image it lists.
        for digest in [digest_of(pipeline, image), *platform_digests(pipeline, image).values()]:
            ref = f"{REGISTRY_IMAGE}/{image}@{digest}"
            verified = cosign("verify", "--key", key, ref)
            assert verified.returncode == 0, verified.stderr
            claims = json.loads(verified.stdout)
            assert {claim["critical"]["image"]["docker-manifest-digest"] for claim in claims} == {digest}, claims
            refused = cosign("verify", "--key", tmp_path / "cosign.pub", ref)
            assert refused.returncode != 0, f"{ref} verified with a key that did not sign it"
        for arch, digest in platform_digests(pipeline, image).items():
            check_sbom(image, arch, digest, wanted, key, tmp_path / "cosign.pub")


def check_sbom(image: str, arch: str, digest: str, wanted: set[str], key, other_key) -> None:
    """The SBOM attestation of one platform's image: it verifies with the key (not with another),
    is about that digest, lists the image's Python packages and that platform's Debian packages."""
    ref = f"{REGISTRY_IMAGE}/{image}@{digest}"
    attested = cosign("verify-attestation", "--key", key, "--type", "spdxjson", ref)
    assert attested.returncode == 0, attested.stderr
    statements = [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in attested.stdout.splitlines()
        if line.strip()
    ]
    assert len(statements) == 1, [statement["predicateType"] for statement in statements]
    statement = statements[0]
    assert statement["predicateType"] == "https://spdx.dev/Document", statement["predicateType"]
    assert [subject["digest"]["sha256"] for subject in statement["subject"]] == [digest.removeprefix("sha256:")]
    python = {
        package["name"]
        for package in statement["predicate"]["packages"]
        if any(ref["referenceLocator"].startswith("pkg:pypi/") for ref in package.get("externalRefs", []))
    }
    assert wanted <= python, f"{image}: the SBOM lacks {wanted - python} (its Python packages: {sorted(python)})"
    # syft read the platform's own file system: its Debian packages are of that architecture.
    deb_arches = {
        match[1]
        for package in statement["predicate"]["packages"]
        for ref_ in package.get("externalRefs", [])
        if (match := re.match(r"pkg:deb/[^?]*\?(?:.*&)?arch=([a-z0-9]+)", ref_["referenceLocator"]))
    }
    assert arch in deb_arches and deb_arches <= {arch, "all"}, f"{image} {arch}: Debian packages of {deb_arches}"
    refused = cosign("verify-attestation", "--key", other_key, "--type", "spdxjson", ref)
    assert refused.returncode != 0, f"{ref}'s SBOM verified with a key that did not sign it"


def test_both_charts_are_published_at_the_release_version(pipeline):
    for chart in IMAGES:
        _, tags = pipeline.registry(f"/v2/gpu-scheduler/charts/{chart}/tags/list")
        assert tags["tags"] == [pipeline.version], tags
        _, manifest = pipeline.registry(
            f"/v2/gpu-scheduler/charts/{chart}/manifests/{pipeline.version}",
            accept="application/vnd.oci.image.manifest.v1+json",
        )
        assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json", manifest


def test_every_test_job_left_a_junit_report_without_failures(pipeline):
    for job in TEST_JOBS_WITH_PYTEST:
        reports = junit_reports(job)
        assert reports, f"{job}: no JUnit report in .cache/junit"
        assert sum(report["tests"] for report in reports) > 0, f"{job}: {reports}"
        assert all(report["failures"] == report["errors"] == 0 for report in reports), f"{job}: {reports}"


def node_addresses() -> dict[str, str]:
    """The KinD nodes' addresses on the docker network `kind` -> container name."""
    names = run(["docker", "ps", "--filter", f"label=io.x-k8s.kind.cluster={CLUSTER}", "--format", "{{.Names}}"])
    inspected = json.loads(run(["docker", "inspect", *names.stdout.split()]).stdout)
    return {c["NetworkSettings"]["Networks"]["kind"]["IPAddress"]: c["Name"].lstrip("/") for c in inspected}


def digest_of(pipeline, image: str, tag: str = "") -> str:
    """The registry's digest of what `image`:`tag` names (default: the commit's tag, the index
    whose amd64 image every test job ran)."""
    headers, _ = pipeline.registry(
        f"/v2/gpu-scheduler/{image}/manifests/{tag or pipeline.commit}", method="HEAD", accept=ANY_MANIFEST
    )
    return headers["Docker-Content-Digest"]


def platform_of(described: dict) -> str:
    """os/architecture[/variant] of an index entry's platform or of an image config."""
    return "/".join(described[key] for key in ("os", "architecture", "variant") if described.get(key))


def platform_digests(pipeline, image: str) -> dict[str, str]:
    """arch -> the digest of the image the commit's index lists for linux/<arch>."""
    _, index = pipeline.registry(f"/v2/gpu-scheduler/{image}/manifests/{pipeline.commit}", accept=INDEX_TYPE)
    assert index.get("mediaType") == INDEX_TYPE, index
    found = {entry["platform"]["architecture"]: entry["digest"] for entry in index["manifests"]}
    assert sorted(found) == sorted(ARCHES), f"{image}:{pipeline.commit} lists {found}"
    return found


def manifest_of(pipeline, image: str, digest: str) -> dict:
    """The image manifest `digest`."""
    return pipeline.registry(f"/v2/gpu-scheduler/{image}/manifests/{digest}", accept=MANIFEST_TYPES)[1]


def config_of(pipeline, image: str, digest: str) -> dict:
    """The config blob of the image manifest `digest`."""
    config = manifest_of(pipeline, image, digest)["config"]["digest"]
    return pipeline.registry(f"/v2/gpu-scheduler/{image}/blobs/{config}")[1]


def test_the_kind_nodes_containerd_pulled_both_images_from_the_registry(pipeline):
    nodes = node_addresses()
    requests = [
        (nodes[address], method, name, reference)
        for address, method, name, reference, status, agent in ACCESS.findall(
            (PIPELINE_DIR / "registry.log").read_text()
        )
        if address in nodes and status == "200" and agent.startswith("containerd/")
    ]

    for image in IMAGES:
        name = f"gpu-scheduler/{image}"
        platforms = platform_digests(pipeline, image)
        # containerd resolves the tag to the index's digest, fetches the index, then the
        # manifest of its own platform (amd64) only. The deploy's pods pull the release tag of
        # the same index, on nodes of their own: a fetch by digest alone does not say which
        # tag a node asked for.
        resolved = {node for node, _, n, reference in requests if n == name and reference == pipeline.commit}
        fetched = {
            node
            for node, method, n, reference in requests
            if n == name and method == "GET" and reference == platforms["amd64"]
        }
        foreign = {node for node, _, n, reference in requests if n == name and reference == platforms["arm64"]}
        assert not foreign, f"KinD nodes {sorted(foreign)} fetched the arm64 manifest of {image}"
        pulled = resolved & fetched
        assert pulled, f"no KinD node of {CLUSTER} pulled {image}:{pipeline.commit} from {REGISTRY}"
        # Every node whose containerd holds the commit's image asked the registry for it: an
        # image built here and put on a node by `kind load` would be there with no such request.
        holding = {
            node
            for node in set(nodes.values())
            if f"{REGISTRY_IMAGE}/{image}:{pipeline.commit}"
            in run(["docker", "exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q"]).stdout.split()
        }
        assert holding and holding <= pulled, f"{image}: held by {sorted(holding)}, pulled by {sorted(pulled)}"


def test_deployed_pods_run_the_release_tag_with_the_tested_digest(pipeline):
    pods = json.loads(pipeline.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    digests = {f"{REGISTRY_IMAGE}/{image}": digest_of(pipeline, image) for image in IMAGES}
    # What the amd64 image of each index is, by its config's digest: the image ID containerd's
    # CRI gives the image it unpacked and runs.
    amd64_configs = {
        f"{REGISTRY_IMAGE}/{image}": manifest_of(pipeline, image, platform_digests(pipeline, image)["amd64"])["config"][
            "digest"
        ]
        for image in IMAGES
    }
    nodes = node_addresses()

    running = {}
    for pod in pods:
        for status in pod["status"].get("containerStatuses", []):
            repository, _, tag = status["image"].rpartition(":")
            if repository in digests:
                # The charts' own default, their appVersion: the tag promote made.
                assert tag == pipeline.version, f"{pod['metadata']['name']}: {status['image']}"
                # The release tag's index, as the kubelet reports it...
                assert status["imageID"] == f"{repository}@{digests[repository]}", status
                # ...of which the node's containerd unpacked the amd64 image: its CRI names an image
                # by its config's digest, in a record whose target is the index.
                node = nodes[pod["status"]["hostIP"]]
                listed = run(["docker", "exec", node, "ctr", "-n", "k8s.io", "images", "ls"])
                assert listed.returncode == 0, listed.stderr
                ids = {
                    fields[0]
                    for fields in (line.split() for line in listed.stdout.splitlines()[1:])
                    if fields and fields[0].startswith("sha256:") and fields[2] == digests[repository]
                }
                assert ids == {amd64_configs[repository]}, (node, ids, amd64_configs[repository])
                assert status["ready"], f"{pod['metadata']['name']} is not ready"
                running.setdefault(repository, set()).add(pod["metadata"]["namespace"])
    assert running == {
        f"{REGISTRY_IMAGE}/gpu-scheduler": {"gpu-scheduler-system"},
        f"{REGISTRY_IMAGE}/gpu-scheduler-check": {"gpu-scheduler-check"},
    }, running


def test_argocd_synced_both_applications_healthy_at_the_served_release(pipeline):
    served = PIPELINE_DIR / "git" / "served"
    release = run(["git", "--git-dir", served / "gpu-scheduler.git", "rev-parse", "deploy"]).stdout.strip()
    values = run(["git", "--git-dir", served / "platform.git", "rev-parse", "main"]).stdout.strip()
    # The charts publish-charts pushed: the tag's version, from the registry.
    charts = [pipeline.tag.removeprefix("v"), values]
    applications = json.loads(pipeline.kubectl("-n", "argocd", "get", "applications.argoproj.io", "-o", "json"))

    def state(app):
        sync = app["status"]["sync"]
        return (
            sync["status"],
            app["status"]["health"]["status"],
            # The charts' Applications have two sources (chart version, platform's values); the root one.
            sync.get("revisions") or [sync.get("revision")],
            app["status"]["operationState"]["phase"],
        )

    states = {app["metadata"]["name"]: state(app) for app in applications["items"]}
    # One Application per chart on the one cluster labelled for both, and the root.
    assert states == {
        "gpu-scheduler-in-cluster": ("Synced", "Healthy", charts, "Succeeded"),
        "gpu-scheduler-check-in-cluster": ("Synced", "Healthy", charts, "Succeeded"),
        "gpu-scheduler-gitops": ("Synced", "Healthy", [release], "Succeeded"),
    }, states
    # Argo CD's own Events: the scheduler was Synced and Healthy at this release before
    # anything of the check existed (its first health change away from Missing is its sync
    # creating its objects), as RollingSync's steps require (tests/argocd says more).
    apps = {app["metadata"]["name"]: app for app in applications["items"]}
    scheduler = argocd_events(pipeline, apps["gpu-scheduler-in-cluster"])
    check = argocd_events(pipeline, apps["gpu-scheduler-check-in-cluster"])
    assert scheduler_ready_before_check(scheduler, check, ",".join(charts)), f"{scheduler} / {check}"


def argocd_events(pipeline, app: dict) -> list[tuple[int, str]]:
    """(nanoseconds since the epoch, message) of the Events Argo CD recorded about this
    Application object (its UID), oldest first: Argo CD names each <application>.<UnixNano in hex>."""
    name, uid = app["metadata"]["name"], app["metadata"]["uid"]
    selector = f"involvedObject.name={name}"
    events = json.loads(pipeline.kubectl("-n", "argocd", "get", "events", "--field-selector", selector, "-o", "json"))
    return sorted(
        (int(event["metadata"]["name"].rpartition(".")[2], 16), event["message"])
        for event in events["items"]
        if event["involvedObject"].get("uid") == uid
    )


def scheduler_ready_before_check(
    scheduler: list[tuple[int, str]], check: list[tuple[int, str]], revisions: str
) -> bool:
    """Whether the scheduler's Events say it was Synced and Healthy when the check's objects first
    appeared, and that a sync of it to `revisions` (Argo CD's "<chart version>,<values commit>")
    succeeded. RollingSync waits for Synced and
    Healthy, not for the end of the sync operation (its PostSync hook may still run then)."""
    appeared = [ns for ns, message in check if re.fullmatch(r"Updated health status: \w* -> (?!Missing$)\w+", message)]
    synced = [ns for ns, message in scheduler if message == f"Sync operation to {revisions} succeeded"]
    if not appeared or not synced:
        return False
    last = {}
    for ns, message in scheduler:
        change = re.fullmatch(r"Updated (sync|health) status: \w* -> (\w+)", message)
        if change and ns < appeared[0]:
            last[change[1]] = change[2]
    return last == {"sync": "Synced", "health": "Healthy"}
