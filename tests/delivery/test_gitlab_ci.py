"""The GitLab pipeline: its shape, and its lint and test jobs run for real by gitlab-ci-local.

gitlab-ci-local 4.73.0 runs the jobs on this host (--force-shell-executor:
no Docker here) in this working tree, so the lint job proves that `make lint
lint-delivery` passes on the tree as it is. The test job runs `make
test-unit`, which includes this very test: running it in full would recurse,
so it runs with PYTEST_ADDOPTS=--collect-only, which still proves the job's
wiring (tools fetched, venv ready, pytest started with the right selection)
without running the suite a second time.
"""

from __future__ import annotations

import os
import re

import pytest
import yaml

from .conftest import REPO, run

pytestmark = pytest.mark.delivery

CI = yaml.safe_load((REPO / ".gitlab-ci.yml").read_text())
JOBS = {name: job for name, job in CI.items() if isinstance(job, dict) and "stage" in job}
# A tag that names a version: digits, not "latest" or a bare major.
PINNED = re.compile(r"^[^:@]+(:v?\d+\.\d+\.\d+[-\w.]*)$")


def bases_of(job: dict) -> list[dict]:
    """The hidden jobs `job` extends, in order."""
    extends = job.get("extends", [])
    return [CI[name] for name in ([extends] if isinstance(extends, str) else extends)]


def raw_image_of(job: dict) -> str:
    """The job's image as the file writes it (a variable, in this file)."""
    image = job.get("image") or next(base["image"] for base in bases_of(job) if "image" in base)
    return image["name"] if isinstance(image, dict) else image


def expanded(value: str) -> str:
    """`value` with a whole-value $VARIABLE replaced by its default in the file's variables."""
    if found := re.fullmatch(r"\$(\w+)", value):
        assert found[1] in CI["variables"], f"{value} has no default in the file's variables"
        return CI["variables"][found[1]]
    return value


def image_of(job: dict) -> str:
    """The image a job runs by default: the file's default of its image variable."""
    return expanded(raw_image_of(job))


def variables_of(job: dict) -> dict:
    """The job's variables with those of the hidden jobs it extends (GitLab merges them)."""
    merged: dict = {}
    for base in bases_of(job):
        merged.update(base.get("variables", {}))
    return {**merged, **job.get("variables", {})}


# The jobs that start their own dockerd (build-image, e2e-kind): a privileged runner's.
PRIVILEGED = {name for name, job in JOBS.items() if "scripts/docker-engine.sh ensure" in job.get("script", [])}


def run_pipeline(tool, *args: str, timeout: float = 300):
    return run(
        [
            tool,
            *args,
            "--force-shell-executor",
            "--state-dir",
            ".cache/gitlab-ci-local",
            "--no-color",
        ],
        cwd=REPO,
        timeout=timeout,
    )


RELEASE_STAGE = "release"
# What a release tag's pipeline is, for its rules: GitLab's variables of a pushed tag; every
# other one unset.
TAG_PIPELINE = {"CI_COMMIT_TAG": "v1.2.3", "CI_PIPELINE_SOURCE": "push", "CI_DEFAULT_BRANCH": "main"}


def condition_holds(condition: str, variables: dict[str, str]) -> bool:
    """A `rules: if:` expression of the forms this file uses ($A, $A == $B, $A == "x", !=, &&,
    ||), evaluated for `variables`; any other form is an error, never a guess."""

    def value(term: str) -> str | None:
        if found := re.fullmatch(r"\$(\w+)", term.strip()):
            return variables.get(found[1])
        if found := re.fullmatch(r'"([^"]*)"', term.strip()):
            return found[1]
        raise AssertionError(f"a rules:if term this test cannot read: {term!r} in {condition!r}")

    def holds(atom: str) -> bool:
        if found := re.fullmatch(r"(.+?)\s*(==|!=)\s*(.+)", atom.strip()):
            return (value(found[1]) == value(found[3])) == (found[2] == "==")
        return bool(value(atom))

    return any(all(holds(atom) for atom in either.split("&&")) for either in condition.split("||"))


def runs_in(job: dict, variables: dict[str, str]) -> bool:
    """Whether a pipeline with `variables` has `job`: its first rule that matches (GitLab's order)
    says, and no rules means every pipeline."""
    rules = job.get("rules", next((base["rules"] for base in bases_of(job) if "rules" in base), None))
    if rules is None:
        return True
    for rule in rules:
        if "if" not in rule or condition_holds(rule["if"], variables):
            return rule.get("when", "on_success") != "never"
    return False


def before_the_release() -> dict[str, dict]:
    """Every job of a stage before the release stage: lint, the tests, the build, the e2e."""
    stages = CI["stages"][: CI["stages"].index(RELEASE_STAGE)]
    return {name: job for name, job in JOBS.items() if job["stage"] in stages}


def waits_for(name: str) -> set[str]:
    """Every job `name` waits for: its needs, theirs, and so on."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for need in needs_of(JOBS[todo.pop()]) - found:
            found.add(need)
            todo.append(need)
    return found


def test_stages_run_lint_test_build_e2e_release_deploy():
    assert CI["stages"] == ["lint", "test", "build", "e2e", "release", "deploy"]
    assert {job["stage"] for job in JOBS.values()} == set(CI["stages"])


def test_every_job_image_is_pinned_to_a_version():
    for name, job in JOBS.items():
        assert PINNED.match(image_of(job)), f"{name}: {image_of(job)} is not pinned"


def test_every_job_image_is_a_variable_with_a_default_so_users_set_theirs_without_editing_the_file():
    # A project's CI/CD variables outrank the file's: a mirror of the images is set there.
    for name, job in JOBS.items():
        assert re.fullmatch(r"\$[A-Z_]+_IMAGE", raw_image_of(job)), f"{name}: {raw_image_of(job)} is not a variable"
    assert {raw_image_of(job) for job in JOBS.values()} == {
        "$TOOLCHAIN_IMAGE",
        "$GO_IMAGE",
        "$RELEASE_CLI_IMAGE",
        "$ARGOCD_IMAGE",
    }


def test_the_toolchain_image_is_a_node_lts_line_still_maintained():
    # Node 20 reached its end of life in April 2026; 22 and 24 are LTS lines, on Debian bookworm
    # (Python 3.11) like the Go image.
    image = CI["variables"]["TOOLCHAIN_IMAGE"]
    found = re.fullmatch(r"node:(\d+)\.\d+\.\d+-bookworm", image)
    assert found and int(found[1]) in (22, 24), image


def test_privileged_jobs_run_on_the_runners_a_variable_names_with_a_default():
    assert PRIVILEGED == {"build-image", "e2e-kind"}
    for name in PRIVILEGED:
        assert JOBS[name]["tags"] == ["$PRIVILEGED_RUNNER_TAG"], name
    # A plain value: GitLab does not expand a variable inside a tag's variable, and an empty
    # tag matches no runner.
    default = CI["variables"]["PRIVILEGED_RUNNER_TAG"]
    assert default and "$" not in default, default
    # The others run on any runner: none asks for privileges.
    assert [name for name, job in JOBS.items() if "tags" in job and name not in PRIVILEGED] == []


def test_the_oldest_kubernetes_stage_gates_the_release():
    job = JOBS["test-compat"]

    assert job["stage"] == "test" and job["script"] == ["make test-compat"]
    assert image_of(job) == image_of(JOBS["test-cluster"]), "Go builds its control plane"
    # Go's caches kept across pipelines, keyed on both control planes' modules.
    assert variables_of(job)["GOCACHE"] == "$CI_PROJECT_DIR/.cache/go/build"
    go_cache = [cache for cache in job["cache"] if ".cache/go/" in cache["paths"]]
    assert go_cache and go_cache[0]["key"]["files"] == ["cluster/compat/go.sum", "cluster/local/go.sum"]
    assert runs_in(job, TAG_PIPELINE)
    assert "test-compat" in needs_of(JOBS["promote"])
    # It tests what it says: the compat control plane (Kubernetes 1.35) and its marker.
    script = (REPO / "scripts" / "test-compat.sh").read_text()
    assert "LOCAL_K8S_MODULE=cluster/compat" in script and ".venv/bin/pytest -m compat" in script
    assert "k8s.io/kubernetes v1.35." in (REPO / "cluster" / "compat" / "go.mod").read_text()


def test_merge_requests_and_branches_run_one_pipeline_each():
    rules = CI["workflow"]["rules"]

    assert rules[0] == {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}
    assert {
        "if": "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS",
        "when": "never",
    } in rules


def test_images_are_built_by_images_sh_with_the_jobs_own_docker_engine_not_kaniko():
    build = JOBS["build-image"]
    script = build["script"]
    publish = (REPO / "scripts" / "publish-images.sh").read_text()

    # kaniko is archived upstream: no job uses it.
    assert "kaniko" not in (REPO / ".gitlab-ci.yml").read_text()
    assert script == ["scripts/docker-engine.sh ensure", "scripts/publish-images.sh"]
    # Go's image: crane (cluster/crane) makes the index.
    assert raw_image_of(build) == "$GO_IMAGE" and image_of(build).endswith("-bookworm"), image_of(build)
    # One images.sh build per platform, under a local tag of that platform.
    assert 'SCHEDULER_IMAGE="gpu-scheduler:build-$arch"' in publish
    assert 'IMAGE_PLATFORM="$platform" "$REPO_ROOT/scripts/images.sh" build' in publish
    # The login is the job's own, never the runner's Docker config.
    assert build["variables"]["DOCKER_CONFIG"] == "$CI_PROJECT_DIR/.cache/docker-config"


def test_build_image_builds_amd64_and_arm64_by_default_and_pushes_the_commit_tags_only():
    build = JOBS["build-image"]
    publish = (REPO / "scripts" / "publish-images.sh").read_text()

    # release-check refuses a wrong release tag before anything is built.
    assert {"job": "release-check", "optional": True} in build["needs"]
    assert CI["variables"]["IMAGE_PLATFORMS"] == "linux/amd64,linux/arm64"
    assert 'docker push --quiet "$ref"' in publish
    assert 'crane index append ${manifests[$image]} --tag "$index"' in publish
    # Each image under its platform's commit tag, the index under the commit's: no other tag,
    # not the branch's, not a release's.
    assert re.findall(r'^ *ref="([^"]*)"', publish, re.M) == ["$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA-$arch"]
    assert re.findall(r'index="([^"]*)"', publish) == ["$CI_REGISTRY_IMAGE/$image:$CI_COMMIT_SHORT_SHA"]
    assert re.findall(r"docker tag (.*)", publish) == ['"$image:build-$arch" "$ref"']
    for word in ("CI_COMMIT_REF_SLUG", "CI_COMMIT_TAG"):
        assert word not in publish and word not in " ".join(build["script"]), word
    assert "wheelhouse" not in JOBS


def test_a_platform_build_image_cannot_build_fails_it_naming_image_platforms(tmp_path):
    """Never a quiet one-platform release: a platform that is not amd64 or arm64, or that
    emulation cannot run here, stops the job with a message naming the variable."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_REGISTRY_IMAGE": "registry.example.com/gpu-scheduler",
        "CI_COMMIT_SHORT_SHA": "0123abcd",
    }
    for platforms, says in (
        ("linux/s390x", "IMAGE_PLATFORMS names 'linux/s390x'"),
        ("linux/amd64,linux/amd64", "names a platform twice"),
    ):
        result = run(["bash", REPO / "scripts" / "publish-images.sh"], env={**env, "IMAGE_PLATFORMS": platforms})
        assert result.returncode != 0, platforms
        assert says in result.stderr and "IMAGE_PLATFORMS" in result.stderr, result.stderr


def needs_of(job: dict) -> set[str]:
    return {need if isinstance(need, str) else need["job"] for need in job.get("needs", [])}


def test_every_release_job_waits_for_every_job_of_the_stages_before_it():
    """What must pass before a release is read from the file's stages, not from a list kept
    here: a job added to lint, test, build or e2e gates the release, or this fails."""
    gating = before_the_release()
    releasing = [name for name, job in JOBS.items() if job["stage"] == RELEASE_STAGE]

    # A rule that left a test job out of tag pipelines would let a release pass without it.
    assert [name for name, job in gating.items() if not runs_in(job, TAG_PIPELINE)] == []
    assert releasing
    late = {name: sorted(set(gating) - waits_for(name)) for name in releasing}
    assert late == dict.fromkeys(releasing, []), f"release jobs that do not wait for these: {late}"


def test_the_rule_reader_knows_a_tag_pipeline_from_a_branch_pipeline():
    """The checker itself: the rules of this file read for a tag and for a branch."""
    branch = {"CI_COMMIT_BRANCH": "main", "CI_PIPELINE_SOURCE": "push", "CI_DEFAULT_BRANCH": "main"}
    assert condition_holds("$CI_COMMIT_TAG", TAG_PIPELINE)
    assert not condition_holds("$CI_COMMIT_TAG", branch)
    assert not condition_holds("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", TAG_PIPELINE)
    assert condition_holds("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", branch)
    assert not condition_holds('$CI_PIPELINE_SOURCE == "merge_request_event"', branch)
    assert condition_holds('$CI_PIPELINE_SOURCE != "merge_request_event" && $CI_COMMIT_BRANCH', branch)
    assert not condition_holds("$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS", branch)
    with pytest.raises(AssertionError, match="cannot read"):
        condition_holds("$CI_COMMIT_TAG =~ /^v/", TAG_PIPELINE)
    assert runs_in(JOBS["promote"], TAG_PIPELINE) and not runs_in(JOBS["promote"], branch)
    assert runs_in(JOBS["e2e-kind"], TAG_PIPELINE) and runs_in(JOBS["e2e-kind"], branch)
    assert runs_in(JOBS["deploy"], TAG_PIPELINE) and not runs_in(JOBS["release-check"], branch)


def test_a_release_needs_every_test_job_and_promotes_the_tested_digests():
    promote = JOBS["promote"]

    # promote makes the release tags: it waits for each of those jobs itself.
    assert needs_of(promote) == set(before_the_release())
    # Not optional: a test job that did not pass (or did not run) stops it.
    assert all(isinstance(need, str) for need in promote["needs"]), promote["needs"]
    assert promote["script"] == ["scripts/promote.sh"]
    script = (REPO / "scripts" / "promote.sh").read_text()
    assert 'crane tag "$CI_REGISTRY_IMAGE/$image@$digest" "$tag"' in script
    assert 'for tag in "$CI_COMMIT_TAG" "$VERSION"; do' in script
    assert "docker push" not in script and "docker build" not in script
    # Every job that makes a release waits for promote; the GitLab release for its signatures too.
    assert needs_of(JOBS["publish-charts"]) == {"promote"}
    assert needs_of(JOBS["sign"]) == {"promote"}
    assert needs_of(JOBS["gitlab-release"]) == {"promote", "sign", "publish-charts"}


def test_the_release_signs_each_promoted_digest_and_attaches_its_sbom():
    sign = JOBS["sign"]
    script = (REPO / "scripts" / "sign.sh").read_text()

    assert sign["script"] == ["scripts/sign.sh"]
    # Go for crane, as promote; the tools are fetched or built by signing-tools.sh.
    assert raw_image_of(sign) == "$GO_IMAGE"
    assert sign["variables"]["DOCKER_CONFIG"] == "$CI_PROJECT_DIR/.cache/docker-config"
    assert ".cache/release/" in sign["artifacts"]["paths"]
    # By digest, the digest the release tag names and the tests ran; never a tag.
    assert 'ref="$CI_REGISTRY_IMAGE/$image@$digest"' in script
    assert '[[ "$digest" == "$tested" ]]' in script
    # The index and, --recursive, each platform's image it lists; an SBOM of each platform's image.
    for step in ('"$COSIGN" sign --yes --recursive --key "$private"', '--type spdxjson --predicate "$sbom"'):
        assert step in script, step
    assert 'platform_ref="$CI_REGISTRY_IMAGE/$image@$platform_digest"' in script
    assert '"$SYFT" scan --quiet "registry:$platform_ref" --output "spdx-json=$sbom"' in script
    # The key is the project's CI/CD variable; there is no default key to fall back on.
    assert 'die "sign: COSIGN_PRIVATE_KEY is not set' in script
    # The tools at the versions their Go modules pin, fetched or built by one script.
    for tool, module in (("cosign", "github.com/sigstore/cosign/v3"), ("syft", "github.com/anchore/syft")):
        assert f'"$REPO_ROOT/scripts/signing-tools.sh" {tool}' in script
        gomod = (REPO / "cluster" / tool / "go.mod").read_text()
        assert re.search(rf"^\s+{re.escape(module)} v\d+\.\d+\.\d+( // indirect)?$", gomod, re.M), tool
        assert f"tool {module}/cmd/{tool}" in gomod


def test_release_jobs_run_on_tags_only():
    for name in ("release-check", "promote", "sign", "publish-charts", "gitlab-release"):
        assert JOBS[name]["rules"] == [{"if": "$CI_COMMIT_TAG"}], name
        assert name == "release-check" or JOBS[name]["stage"] == "release", name
    publish = JOBS["publish-charts"]
    script = " ".join(publish["script"])

    assert "helm package charts/gpu-scheduler charts/gpu-scheduler-check" in script
    assert 'helm push $HELM_PUSH_FLAGS "$chart" "oci://$CI_REGISTRY_IMAGE/charts"' in script
    release = JOBS["gitlab-release"]["release"]
    assert release["tag_name"] == "$CI_COMMIT_TAG"
    assert "$CI_COMMIT_SHORT_SHA" in release["description"]


def test_test_jobs_keep_their_junit_reports_whatever_their_outcome():
    assert CI["variables"]["JUNIT_DIR"] == "$CI_PROJECT_DIR/.cache/junit"
    for name in ("test-unit", "test-cluster", "e2e-kind"):
        job = JOBS[name]
        artifacts = job.get("artifacts") or next(base["artifacts"] for base in bases_of(job) if "artifacts" in base)
        assert artifacts["when"] == "always", name
        assert artifacts["reports"]["junit"] == ".cache/junit/*.xml", name


def test_a_failed_e2e_keeps_the_kind_clusters_logs():
    e2e = JOBS["e2e-kind"]

    assert e2e["after_script"][0] == (
        'if [ "$CI_JOB_STATUS" = failed ]; then scripts/kind.sh logs .cache/kind-logs || true; fi'
    )
    assert ".cache/kind-logs/" in e2e["artifacts"]["paths"]


def test_test_cluster_keeps_gos_module_and_build_caches():
    job = JOBS["test-cluster"]

    assert variables_of(job)["GOMODCACHE"] == "$CI_PROJECT_DIR/.cache/go/mod"
    assert variables_of(job)["GOCACHE"] == "$CI_PROJECT_DIR/.cache/go/build"
    go_cache = [cache for cache in job["cache"] if ".cache/go/" in cache["paths"]]
    assert go_cache and go_cache[0]["key"]["files"] == ["cluster/local/go.sum"], job["cache"]


def test_e2e_runs_kind_on_the_pushed_images():
    e2e = JOBS["e2e-kind"]
    script = " ".join(e2e["script"])

    assert e2e["needs"] == ["build-image"]
    assert "make kind-up e2e" in script
    assert 'SCHEDULER_IMAGE="$CI_REGISTRY_IMAGE/gpu-scheduler:$CI_COMMIT_SHORT_SHA"' in script
    assert 'CHECK_IMAGE="$CI_REGISTRY_IMAGE/gpu-scheduler-check:$CI_COMMIT_SHORT_SHA"' in script


def test_e2e_nodes_pull_the_pushed_images_from_the_registry_and_nothing_is_built_or_loaded():
    e2e = JOBS["e2e-kind"]
    script = e2e["script"]

    assert not [line for line in script if "docker pull" in line or "docker login" in line]
    assert script[0] == "scripts/docker-engine.sh ensure"
    assert "BUILD_IMAGES=pull" in script[1]
    assert e2e["variables"]["KIND_REGISTRY"] == "$CI_REGISTRY"
    assert e2e["variables"]["KIND_REGISTRY_USER"] == "$CI_REGISTRY_USER"
    assert e2e["variables"]["KIND_REGISTRY_PASSWORD"] == "$CI_REGISTRY_PASSWORD"
    # The cluster goes at the end, unless make pipeline keeps it for its deploy job.
    assert e2e["after_script"][-1] == 'if [ "$KIND_KEEP" != 1 ]; then make kind-down || true; fi'


def test_pipeline_runs_the_cluster_and_fault_tests_on_the_local_control_plane():
    job = JOBS["test-cluster"]

    assert job["stage"] == "test"
    assert job["script"] == ["make test-cluster"]
    # Go builds the control plane; the image is the Debian one of the other jobs' Python.
    assert image_of(job).startswith("golang:1.26.") and image_of(job).endswith("-bookworm"), image_of(job)
    script = (REPO / "scripts" / "test-cluster.sh").read_text()
    assert '.venv/bin/pytest -m "cluster or e2e or faults"' in script
    assert "scripts/local-down.sh' EXIT" in script


def test_e2e_job_runs_on_glibc_with_the_test_group_and_downloads_kind_rather_than_compiling_it():
    e2e = JOBS["e2e-kind"]
    image = image_of(e2e)
    script = " ".join(e2e["script"] + e2e.get("before_script", CI[".toolchain"]["before_script"]))

    # Not Alpine (musl): py-spy has no wheel there. The e2e needs the test group only.
    assert "alpine" not in image and "dind" not in image and image.endswith("-bookworm"), image
    assert e2e["variables"]["INSTALL_GROUPS"] == "test"
    # No Go toolchain and no `go install`: scripts/kind-binary.sh downloads the release binary.
    assert "go install" not in script and "apk add" not in script
    kind_binary = (REPO / "scripts" / "kind-binary.sh").read_text()
    assert "https://github.com/kubernetes-sigs/kind/releases/download/$KIND_VERSION/kind-" in kind_binary


def test_e2e_job_runs_for_merge_requests_the_default_branch_and_tags_and_by_hand_elsewhere():
    rules = JOBS["e2e-kind"]["rules"]

    assert rules[:3] == [
        {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'},
        {"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"},
        {"if": "$CI_COMMIT_TAG"},
    ]
    assert rules[3] == {"if": "$CI_COMMIT_BRANCH", "when": "manual", "allow_failure": True}
    # deploy (default branch only) needs it: there it always runs.
    assert "e2e-kind" in JOBS["deploy"]["needs"]


def test_deploy_is_manual_on_the_default_branch_and_tags_and_waits_for_what_git_says():
    deploy = JOBS["deploy"]

    # allow_failure: a pipeline nobody deploys is passed, not blocked.
    assert deploy["rules"] == [
        {"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", "when": "manual", "allow_failure": True},
        {"if": "$CI_COMMIT_TAG", "when": "manual", "allow_failure": True},
    ]
    # A tag's deploy waits for its release.
    assert {"job": "publish-charts", "optional": True} in deploy["needs"]
    assert {"job": "sign", "optional": True} in deploy["needs"]
    script = "\n".join(deploy["script"])
    # The only sync is of the root Application (argocd/root.yaml): argocd/ as git has it.
    root = yaml.safe_load_all((REPO / "argocd" / "root.yaml").read_text())
    assert deploy["variables"]["ARGOCD_ROOT_APP"] in {doc["metadata"]["name"] for doc in root}
    assert re.findall(r"argocd app sync (\S+)", script) == ['"$ARGOCD_ROOT_APP"']
    # Then every Application of ours, by label (one per chart and cluster), stage 1 before 2.
    assert "for stage in 1 2; do" in script
    assert 'argocd app wait -l "$selector" --operation --sync --health' in script
    # and none of ours is still syncing when it ends (RollingSync may sync a step twice).
    last = "argocd app wait -l app.kubernetes.io/part-of=gpu-scheduler --operation --sync --health --timeout 900"
    assert deploy["script"][-1] == last
    assert 'selector="app.kubernetes.io/part-of=gpu-scheduler,stage=$stage"' in script
    # Nothing from CI overrides git: no ApplicationSet pushed, no live parameter.
    assert not [word for word in ("appset create", "app set", "helm-set") if word in script]


def test_gitlab_ci_local_lists_every_job_of_a_default_branch_pipeline(gitlab_ci_local):
    # Whatever branch this checkout is on: the pipeline a merge to main runs.
    branch = ("--variable", "CI_COMMIT_BRANCH=main", "--variable", "CI_DEFAULT_BRANCH=main")
    result = run_pipeline(gitlab_ci_local, "--list", *branch)

    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:] if line.strip()}
    assert {"lint", "test-unit", "test-cluster", "test-compat", "build-image", "e2e-kind", "deploy"} <= set(rows), (
        result.stdout
    )
    assert rows["test-compat"][:3] == ["test", "on_success", "false"], result.stdout
    # stage, when, allow_failure: the manual deploy does not block the pipeline.
    assert rows["deploy"][:3] == ["deploy", "manual", "true"], result.stdout
    assert rows["e2e-kind"][:3] == ["e2e", "on_success", "false"], result.stdout
    assert not {"release-check", "promote", "sign", "publish-charts", "gitlab-release"} & set(rows), result.stdout


def test_gitlab_ci_local_lists_the_release_jobs_of_a_tag_pipeline(gitlab_ci_local):
    tag = ("--variable", "CI_COMMIT_TAG=v9.9.9", "--variable", "CI_COMMIT_BRANCH=")
    result = run_pipeline(gitlab_ci_local, "--list", *tag)

    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:] if line.strip()}
    for job in ("promote", "sign", "publish-charts", "gitlab-release"):
        assert rows[job][:3] == ["release", "on_success", "false"], result.stdout
    assert rows["deploy"][:3] == ["deploy", "manual", "true"], result.stdout


def release_check(tool, tag: str, registry: str):
    return run_pipeline(
        tool,
        "release-check",
        "--variable",
        f"CI_COMMIT_TAG={tag}",
        "--variable",
        f"RELEASE_REGISTRY={registry}",
        timeout=120,
    )


def test_release_check_passes_a_tag_of_the_charts_version_under_gitlab_ci_local(gitlab_ci_local):
    version = run(["python3", REPO / "scripts" / "version.py"]).stdout.strip()
    registry = re.search(r"^  registry: (\S+)", (REPO / "charts/gpu-scheduler/values.yaml").read_text(), re.M)[1]

    result = release_check(gitlab_ci_local, f"v{version}", registry)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "PASS  release-check" in result.stdout


@pytest.mark.parametrize(
    ("tag", "registry", "message"),
    [
        ("v99.0.0", None, "tag 'v99.0.0' does not match the version"),
        (None, "registry.example.com/elsewhere", "this pipeline pushes the images to registry.example.com/elsewhere"),
    ],
)
def test_release_check_fails_a_tag_that_would_release_something_unpullable(gitlab_ci_local, tag, registry, message):
    version = run(["python3", REPO / "scripts" / "version.py"]).stdout.strip()
    default_registry = re.search(r"^  registry: (\S+)", (REPO / "charts/gpu-scheduler/values.yaml").read_text(), re.M)[
        1
    ]

    result = release_check(gitlab_ci_local, tag or f"v{version}", registry or default_registry)

    assert result.returncode != 0
    assert "FAIL  release-check" in result.stdout
    assert message in result.stdout


def test_lint_job_passes_under_gitlab_ci_local(gitlab_ci_local):
    result = run_pipeline(gitlab_ci_local, "lint")

    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "PASS  lint" in result.stdout
    # The job really ran the delivery linters, not just ruff.
    assert "helm lint --strict" in result.stdout
    assert "hadolint" in result.stdout


def test_unit_test_job_starts_the_unit_suite_under_gitlab_ci_local(gitlab_ci_local):
    result = run_pipeline(gitlab_ci_local, "test-unit", "--variable", "PYTEST_ADDOPTS=--collect-only -q")

    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "PASS  test-unit" in result.stdout
    assert re.search(r"\d+ tests? collected", result.stdout), result.stdout[-3000:]
    assert "tests/delivery/test_gitlab_ci.py" in result.stdout
