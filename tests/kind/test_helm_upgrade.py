"""`helm upgrade` from the previous version to this one, on KinD's real kubelets (issue 51, item 6).

Nothing is tagged yet, so "the previous version" is PREVIOUS_COMMIT: its charts, and its images
built from a `git worktree` of it by its own scripts/images.sh. Its gpu-scheduler release is
installed, its check StatefulSet places two pods, then the release is upgraded to this checkout's
chart and images as CHANGELOG.md's Upgrading section tells users to (`helm upgrade -f` the values
the release was installed with, the image tag changed). What is checked is what the cluster shows:
the pods placed before keep running on their nodes with the devices they had (their spec and
their logs after the upgrade), the pods made after it are bound by the new scheduler with the
devices its Binding wrote (the devices annotation and their logs), no GPU of the map is held
twice, and the admission objects the previous release had and this chart no longer renders are
gone.

The upgraded release is the one `make e2e` installs (the same values, scripts/kind.sh
release-values), so that the KinD tests after this module run against it; where `make e2e`'s
release was installed before, it is uninstalled first. After a failure, or a broken run, the
release is put back as `make e2e` installs it.

UPGRADE_BROKEN makes the upgrade wrong on purpose, and the test must fail:
  leftover         the previous release's placement policy marked helm.sh/resource-policy=keep
                   before the upgrade, so Helm leaves it behind;
  check-chart      the check release upgraded too: its StatefulSet rolls, the pods placed
                   before the upgrade are replaced;
  previous-images  this chart with the previous version's images (image.tag not changed).
(`helm upgrade --reuse-values`, which CHANGELOG.md advises against, is no such case from
PREVIOUS_COMMIT: the values added since render nothing by default, and the test passes.)
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import time
import uuid
from pathlib import Path

import pytest
import yaml
from e2e.cluster import DEVICES_ANNOTATION, FROM_BIND, container_env, devices_entry
from e2e.waiting import NotYet, wait_for
from gpu_scheduler.placement import parse_map
from prerequisites import missing

from . import renewal
from .conftest import CACHE, REPO, Kind, kind_env, pinned_pod, run, tail

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

# The last commit of main on which devices were written into a pod's spec at its creation: the
# parent of the merge that made bind mode the default (d54f729, "Merge wt-admission"). Its chart's
# admission.mode "" meant the MutatingAdmissionPolicy `<release>-placement` where the API server
# serves it (1.36+: KinD's 1.37 here) and the webhook below; admission.mode webhook was the
# webhook on every version. Users who installed from main before 2026-12-07 09:09 run this or older.
PREVIOUS_COMMIT = "0bc8ca400c46ff9d542b97663c1f41c82d9afe9f"
PREVIOUS = PREVIOUS_COMMIT[:12]
PREVIOUS_TREE = CACHE / "upgrade" / PREVIOUS
PREVIOUS_SCHEDULER_IMAGE = f"gpu-scheduler:previous-{PREVIOUS}"
PREVIOUS_CHECK_IMAGE = f"gpu-scheduler-check:previous-{PREVIOUS}"
SCHEDULER_IMAGE = os.environ.get("SCHEDULER_IMAGE", "gpu-scheduler:dev")
CHECK_IMAGE = os.environ.get("CHECK_IMAGE", "gpu-scheduler-check:dev")
HELM = CACHE / "bin" / "helm"
RELEASE, NAMESPACE = renewal.RELEASE, renewal.NAMESPACE
CHECK_RELEASE = "upgrade-check"
# Four lines, no GPU in two of them: pods 0 and 1 are placed before the upgrade, 2 and 3 after.
UPGRADE_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n"
BEFORE, AFTER = 2, 4
ADMISSION_KINDS = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
BROKEN = os.environ.get("UPGRADE_BROKEN", "")
assert BROKEN in ("", "leftover", "check-chart", "previous-images"), f"UPGRADE_BROKEN={BROKEN!r}: see the docstring"


def seconds(started: float) -> str:
    return f"{time.monotonic() - started:.0f}s"


def previous_worktree() -> Path:
    """PREVIOUS_TREE: a `git worktree` of PREVIOUS_COMMIT, made once and kept in .cache (its
    images' inputs, its wheelhouse). A clone without that commit (a shallow one) cannot run this."""
    if (PREVIOUS_TREE / ".git").exists():
        head = run(["git", "-C", PREVIOUS_TREE, "rev-parse", "HEAD"])
        if head.stdout.strip() == PREVIOUS_COMMIT:
            return PREVIOUS_TREE
    if run(["git", "-C", REPO, "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"]).returncode != 0:
        missing(f"this clone lacks the previous version's commit {PREVIOUS_COMMIT}: git fetch --unshallow")
    PREVIOUS_TREE.parent.mkdir(parents=True, exist_ok=True)
    added = run(["git", "-C", REPO, "worktree", "add", "--force", "--detach", PREVIOUS_TREE, PREVIOUS_COMMIT])
    assert added.returncode == 0, tail(added)
    return PREVIOUS_TREE


def build_images(tree: Path, scheduler: str, check: str) -> None:
    """Both images of the checkout `tree`, by its own scripts/images.sh, into its own .cache
    (skipped when their inputs are unchanged)."""
    env = {**os.environ, "CACHE_DIR": str(tree / ".cache"), "SCHEDULER_IMAGE": scheduler, "CHECK_IMAGE": check}
    built = run(["bash", tree / "scripts" / "images.sh", "build"], timeout=1800, cwd=tree, env=env)
    assert built.returncode == 0, tail(built, 6000)


@pytest.fixture(scope="module")
def images(kind) -> None:
    """The previous version's images and this checkout's, built (cached by their inputs) and
    loaded into the workers that lack them. Prints what each took: the previous ones' cold build
    is this test's largest cost, once per machine."""
    started = time.monotonic()
    tree = previous_worktree()
    build_images(tree, PREVIOUS_SCHEDULER_IMAGE, PREVIOUS_CHECK_IMAGE)
    previous_seconds = seconds(started)
    build_images(REPO, SCHEDULER_IMAGE, CHECK_IMAGE)
    loaded = run(
        ["bash", REPO / "scripts" / "kind.sh", "load-missing"]
        + [PREVIOUS_SCHEDULER_IMAGE, PREVIOUS_CHECK_IMAGE, SCHEDULER_IMAGE, CHECK_IMAGE],
        timeout=900,
        env=kind_env(),
    )
    assert loaded.returncode == 0, tail(loaded)
    print(f"\nimages: the previous version's {previous_seconds}, with this checkout's and loaded {seconds(started)}")


def release_values(image: str) -> str:
    """The values file of `make e2e`'s release, naming `image` (scripts/kind.sh release-values)."""
    made = run(["bash", REPO / "scripts" / "kind.sh", "release-values", image], env=kind_env())
    assert made.returncode == 0, tail(made)
    return made.stdout.strip()


def helm(kind: Kind, *args, timeout: float = 420):
    return run([HELM, "--kubeconfig", kind.kubeconfig, *args], timeout=timeout)


def manifest_objects(kind: Kind, revision: int) -> set[tuple[str, str]]:
    """(kind, name) of the admission objects in the release's manifest at `revision`."""
    shown = helm(kind, "-n", NAMESPACE, "get", "manifest", RELEASE, "--revision", str(revision))
    assert shown.returncode == 0, tail(shown)
    return {
        (doc["kind"], doc["metadata"]["name"])
        for doc in yaml.safe_load_all(shown.stdout)
        if doc and doc["kind"] in ADMISSION_KINDS
    }


def cluster_objects(kind: Kind) -> set[tuple[str, str]]:
    """(kind, name) of every admission object in the cluster that Helm made for the release."""
    found = set()
    for kind_name in ADMISSION_KINDS:
        for item in kind.items(kind_name.lower()):
            annotations = item["metadata"].get("annotations") or {}
            if annotations.get("meta.helm.sh/release-name") == RELEASE:
                found.add((kind_name, item["metadata"]["name"]))
    return found


def check_pod(index: int) -> str:
    return f"{CHECK_RELEASE}-gpu-scheduler-check-{index}"


def ticked_since(kind: Kind, namespace: str, name: str, since: float) -> str:
    """The pod's last check line (node and CUDA_VISIBLE_DEVICES its process has) logged after
    `since` (epoch seconds); NotYet before it logs one."""
    shown = kind.kubectl("-n", namespace, "logs", name, "-c", "check", "--timestamps")
    for line in reversed(shown.stdout.splitlines()):
        stamp, _, text = line.partition(" ")
        if " CUDA_VISIBLE_DEVICES=" not in text:
            continue
        logged = datetime.datetime.fromisoformat(f"{stamp[:19]}+00:00").timestamp()
        if logged >= int(since):
            return text
        break
    raise NotYet(f"{name} has logged no check line since the upgrade; its log ends: {shown.stdout[-400:]!r}")


def placed(kind: Kind, namespace: str, index: int, node: str) -> dict:
    """Pod `index` of the check StatefulSet, Running on `node`; NotYet meanwhile."""
    found = kind.kubectl("-n", namespace, "get", "pod", check_pod(index), "-o", "json")
    if found.returncode != 0:
        raise NotYet(f"{check_pod(index)}: {found.stderr.strip()}")
    pod = json.loads(found.stdout)
    where = pod["spec"].get("nodeName") or "no node"
    if pod["status"].get("phase") != "Running":
        conditions = {c["type"]: c.get("message", "") for c in pod["status"].get("conditions", [])}
        raise NotYet(f"{check_pod(index)}: {pod['status'].get('phase')} on {where} {conditions}")
    assert where == node, f"{check_pod(index)} runs on {where}, its map line says {node}"
    return pod


def scheduler_images(kind: Kind) -> dict[str, str]:
    """The release's scheduler pods (by name) and the image each runs."""
    pods = kind.items("-n", NAMESPACE, "pods")
    prefix = f"{RELEASE}-scheduler-"
    return {
        p["metadata"]["name"]: p["spec"]["containers"][0]["image"]
        for p in pods
        if p["metadata"]["name"].startswith(prefix)
    }


def bound_by(kind: Kind, namespace: str, pod: dict) -> str:
    """The instance that reported the pod's Scheduled event: `<schedulerName>-<its pod's name>`."""
    selector = f"involvedObject.uid={pod['metadata']['uid']},reason=Scheduled"
    instances = {
        e.get("reportingInstance") or "" for e in kind.items("-n", namespace, "events", "--field-selector", selector)
    }
    assert len(instances) == 1, f"{pod['metadata']['name']}: Scheduled events from {instances or 'nobody'}"
    return instances.pop()


def restore_make_e2e_release() -> None:
    """After a failure: the release as `make e2e` installs it, for the KinD tests after this one."""
    restored = run(["bash", REPO / "scripts" / "kind.sh", "install"], timeout=900, env=kind_env())
    print(f"\nrelease restored as make e2e installs it: exit {restored.returncode}\n{tail(restored)}")


@pytest.fixture(scope="module")
def upgraded(kind, images, tmp_path_factory):
    """The whole upgrade, as a user makes it; yields what the cluster showed on the way."""
    started = time.monotonic()
    namespace = f"upgrade-{uuid.uuid4().hex[:6]}"
    entries = parse_map(UPGRADE_MAP)
    previous_values = release_values(PREVIOUS_SCHEDULER_IMAGE)
    values = release_values(SCHEDULER_IMAGE)
    # A values file: --set would split the map's lines at their commas.
    check_values = tmp_path_factory.mktemp("upgrade") / "check-values.yaml"
    check_values.write_text(
        yaml.safe_dump({"schedulingMap": UPGRADE_MAP, "replicas": BEFORE, "nodeCheck": {"mode": "fail"}})
    )
    check_args = ["-f", check_values, "--set", "image.registry=", "--set", "image.pullPolicy=Never"]
    succeeded = False
    try:
        # make e2e's release (make test installs it before the KinD tests) is this version:
        # the previous one takes its place. Both are cluster-wide (scheduler name, admission).
        if helm(kind, "-n", NAMESPACE, "status", RELEASE).returncode == 0:
            gone = helm(kind, "-n", NAMESPACE, "uninstall", RELEASE, "--wait")
            assert gone.returncode == 0, tail(gone)
        installed = helm(
            kind, "-n", NAMESPACE, "install", RELEASE, PREVIOUS_TREE / "charts" / "gpu-scheduler",
            "--create-namespace", "-f", previous_values, "--wait", "--timeout", "5m",
        )  # fmt: skip
        assert installed.returncode == 0, f"the previous version's chart did not install: {tail(installed)}"
        install_seconds = seconds(started)

        repository, _, tag = PREVIOUS_CHECK_IMAGE.rpartition(":")
        check = helm(
            kind, "-n", namespace, "install", CHECK_RELEASE, PREVIOUS_TREE / "charts" / "gpu-scheduler-check",
            "--create-namespace", *check_args,
            "--set-string", f"image.repository={repository}", "--set-string", f"image.tag={tag}",
        )  # fmt: skip
        assert check.returncode == 0, tail(check)
        before = {
            index: wait_for(
                f"{check_pod(index)} placed by the previous version on {entries[index].node}",
                lambda index=index: placed(kind, namespace, index, entries[index].node),
                timeout=180,
                interval=1,
            )
            for index in range(BEFORE)
        }
        for index in before:
            logging = functools.partial(ticked_since, kind, namespace, check_pod(index), 0)
            wait_for(f"{check_pod(index)} logging", logging, timeout=60, interval=1)
        placed_seconds = seconds(started)
        schedulers = scheduler_images(kind)

        if BROKEN == "leftover":
            kind.ok("annotate", "mutatingadmissionpolicy", f"{RELEASE}-placement", "helm.sh/resource-policy=keep")
        upgrade_started = time.time()
        upgrade = helm(
            kind, "-n", NAMESPACE, "upgrade", RELEASE, REPO / "charts" / "gpu-scheduler",
            "-f", previous_values if BROKEN == "previous-images" else values, "--wait", "--timeout", "5m",
        )  # fmt: skip
        assert upgrade.returncode == 0, f"helm upgrade to this version failed: {tail(upgrade)}"
        upgrade_seconds = time.monotonic() - started
        if BROKEN == "check-chart":
            repository, _, tag = CHECK_IMAGE.rpartition(":")
            rolled = helm(
                kind, "-n", namespace, "upgrade", CHECK_RELEASE, REPO / "charts" / "gpu-scheduler-check", *check_args,
                "--set-string", f"image.repository={repository}", "--set-string", f"image.tag={tag}", "--wait",
            )  # fmt: skip
            assert rolled.returncode == 0, tail(rolled)

        kind.ok("-n", namespace, "scale", "statefulset", f"{CHECK_RELEASE}-gpu-scheduler-check", f"--replicas={AFTER}")
        after = {
            index: wait_for(
                f"{check_pod(index)} placed by this version on {entries[index].node}",
                lambda index=index: placed(kind, namespace, index, entries[index].node),
                timeout=180,
                interval=1,
            )
            for index in range(BEFORE, AFTER)
        }
        # One tick after the upgrade from every pod: each container's process as it runs now.
        logs = {
            index: wait_for(
                f"{check_pod(index)} logging after the upgrade",
                lambda index=index: ticked_since(kind, namespace, check_pod(index), upgrade_started),
                timeout=60,
                interval=1,
            )
            for index in range(AFTER)
        }
        now = {index: kind.get("-n", namespace, "pod", check_pod(index)) for index in range(AFTER)}
        schedulers.update(scheduler_images(kind))
        images_binding = {}
        for index in range(AFTER):
            instance = bound_by(kind, namespace, now[index]).removeprefix("gpu-scheduler-")
            images_binding[index] = schedulers.get(instance, f"unknown (a scheduler pod {instance} never seen)")
        print(
            f"\nprevious release installed after {install_seconds}, {BEFORE} pods placed after {placed_seconds},"
            f" upgraded after {upgrade_seconds:.0f}s, {AFTER - BEFORE} pods placed after the upgrade after"
            f" {seconds(started)}:\n" + "\n".join(f"  {check_pod(i)}: {logs[i]}" for i in range(AFTER))
        )
        yield {
            "namespace": namespace,
            "entries": entries,
            "before": before,
            "after": after,
            "now": now,
            "logs": logs,
            "images_binding": images_binding,
            "previous_objects": manifest_objects(kind, 1),
            "objects": manifest_objects(kind, 2),
            "cluster_objects": cluster_objects(kind),
        }
        succeeded = True
    finally:
        helm(kind, "-n", namespace, "uninstall", CHECK_RELEASE, "--wait")
        kind.kubectl("delete", "namespace", namespace, "--wait=false")
        if BROKEN == "leftover":
            kind.kubectl("delete", "mutatingadmissionpolicy", f"{RELEASE}-placement", "--ignore-not-found")
        if BROKEN or not succeeded:
            restore_make_e2e_release()


def test_pods_placed_before_the_upgrade_keep_running_on_their_nodes_with_their_devices(upgraded):
    for index, before in upgraded["before"].items():
        entry, now = upgraded["entries"][index], upgraded["now"][index]
        name = now["metadata"]["name"]
        assert now["metadata"]["uid"] == before["metadata"]["uid"], f"{name} is another pod than before the upgrade"
        assert now["spec"]["nodeName"] == entry.node
        assert upgraded["images_binding"][index].endswith(PREVIOUS_SCHEDULER_IMAGE), upgraded["images_binding"]
        assert now["metadata"].get("annotations") == before["metadata"].get("annotations")
        restarts = {s["name"]: s["restartCount"] for s in now["status"]["containerStatuses"]}
        assert restarts == {"check": 0}, f"{name} restarted: {restarts}"
        # The previous version wrote the devices into the spec at creation, as a literal.
        assert [devices_entry(c) for c in now["spec"]["containers"]] == [entry.cuda_visible_devices], now["spec"]
        assert container_env(now) == {"check": entry.cuda_visible_devices}
        line = upgraded["logs"][index]
        assert f"node={entry.node} " in line and f" CUDA_VISIBLE_DEVICES={entry.cuda_visible_devices} " in line, line


def test_pods_made_after_the_upgrade_get_their_devices_from_the_new_schedulers_binding(upgraded):
    for index in upgraded["after"]:
        entry, pod = upgraded["entries"][index], upgraded["now"][index]
        name = pod["metadata"]["name"]
        # The previous template carries no entry: this version's admission gives the bind's.
        assert [devices_entry(c) for c in pod["spec"]["containers"]] == [FROM_BIND], pod["spec"]
        assert upgraded["images_binding"][index].endswith(SCHEDULER_IMAGE), upgraded["images_binding"]
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations.get(DEVICES_ANNOTATION) == entry.cuda_visible_devices, f"{name}: {annotations}"
        assert container_env(pod) == {"check": entry.cuda_visible_devices}
        line = upgraded["logs"][index]
        assert f"node={entry.node} " in line and f" CUDA_VISIBLE_DEVICES={entry.cuda_visible_devices} " in line, line


def test_no_gpu_of_the_map_is_held_twice(upgraded):
    held: dict[tuple[str, str], str] = {}
    for index, pod in upgraded["now"].items():
        node = pod["spec"]["nodeName"]
        for device in container_env(pod)["check"].split(","):
            assert (node, device) not in held, f"{node} GPU {device}: {held[(node, device)]} and {index}"
            held[(node, device)] = pod["metadata"]["name"]
    assert len(held) == sum(len(e.devices) for e in upgraded["entries"].values()), held


def test_the_admission_objects_this_chart_no_longer_renders_are_gone(upgraded):
    removed = upgraded["previous_objects"] - upgraded["objects"]
    # The previous release placed pods by its MutatingAdmissionPolicy: without objects to remove,
    # this test would prove nothing.
    assert ("MutatingAdmissionPolicy", f"{RELEASE}-placement") in removed, sorted(upgraded["previous_objects"])
    left = upgraded["cluster_objects"] - upgraded["objects"]
    assert not left, f"left behind by the upgrade: {sorted(left)}"
    assert upgraded["objects"] <= upgraded["cluster_objects"], sorted(upgraded["objects"] - upgraded["cluster_objects"])


def test_the_new_scheduler_counts_the_gpus_the_pods_placed_before_it_hold(kind, upgraded):
    """A pod mapped onto GPU 1 of node1, which pod 0 holds since before the upgrade (a literal in
    its spec): the release's --gpu-sharing=warn binds it, naming pod 0 as the holder. A scheduler
    blind to the previous version's pods would bind it silently, and under deny double-book it."""
    namespace, held = upgraded["namespace"], upgraded["entries"][0]
    name = "shares-with-0-0"
    kind.apply(pinned_pod(name, held.node, held.devices[-1], CHECK_IMAGE), namespace)

    def shared() -> str:
        selector = f"involvedObject.name={name},reason=GPUShared"
        notes = [
            e.get("message") or e.get("note") or ""
            for e in kind.items("-n", namespace, "events", "--field-selector", selector)
        ]
        if not notes:
            raise NotYet(f"no GPUShared event for {name}: {kind.get('-n', namespace, 'pod', name)['status']}")
        return notes[0]

    note = wait_for(f"{name} bound with a GPUShared warning", shared, timeout=90, interval=1)
    assert check_pod(0) in note, note
