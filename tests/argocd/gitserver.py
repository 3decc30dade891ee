"""Git repositories as the repo server in KinD can reach them: `git daemon` on this host.

One is this checkout as it is (committed or not: what is under test), copied
into a new repository of one commit, so nothing is ever written to the
project's own .git; others are made from a few files (a platform's values
repository). The daemon listens on the gateway address
of the cluster's Docker network, which the pods reach through their node.
Tests change it as users do: a commit, pushed.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from e2e.processes import free_port

from .answering import wait_answering

BRANCH = "main"
NAME = "gpu-scheduler.git"
# Commits made here have a fixed identity: the test's, not the developer's.
GIT_IDENTITY = ["-c", "user.name=gpu-scheduler argocd-e2e", "-c", "user.email=argocd-e2e@gpu-scheduler.invalid"]


def git(*args, cwd: Path, timeout: float = 120) -> str:
    result = subprocess.run(
        ["git", *GIT_IDENTITY, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(map(str, args))} in {cwd}: exit {result.returncode}\n{result.stderr}")
    return result.stdout


def listed_files(checkout: Path) -> list[str]:
    """What `git ls-files` lists (tracked and new, not ignored), read as bytes: a file name
    need not be UTF-8 (CI once met a new file whose name was random bytes; decoding the
    listing as text failed before anything was served). Such names come back as str with
    surrogate escapes, which Path and open() turn into the same bytes again."""
    result = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=checkout,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace")
        raise RuntimeError(f"git ls-files in {checkout}: exit {result.returncode}\n{error}")
    return [os.fsdecode(name) for name in result.stdout.split(b"\0") if name]


def snapshot_of(checkout: Path) -> tuple[list[str], str]:
    """The files of `checkout` git would commit (tracked and new, not ignored), and a description of HEAD."""
    files = sorted({name for name in listed_files(checkout) if (checkout / name).is_file()})
    head = git("rev-parse", "--short", "HEAD", cwd=checkout).strip()
    dirty = git("status", "--porcelain", cwd=checkout).strip()
    return files, head + (" plus uncommitted changes" if dirty else "")


class ServedRepository:
    """A work tree (to commit in) and the bare repository the daemon serves (pushed to).

    `checkout` given: its files (what is under test), as one commit. Else a
    repository of its own from `files` (path -> text): a platform's, say.
    Every repository made under the same `root` is served by one daemon
    (base path root/served), each by its `name`.
    """

    def __init__(self, root: Path, checkout: Path | None = None, name: str = NAME, files: dict[str, str] | None = None):
        self.name = name
        self.work = root / ("work" if name == NAME else f"work-{name.removesuffix('.git')}")
        self.served = root / "served"
        self.bare = self.served / name
        self.work.mkdir(parents=True)
        if checkout is not None:
            listed, head = snapshot_of(checkout)
            for path in listed:
                target = self.work / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((checkout / path).read_bytes())
                target.chmod((checkout / path).stat().st_mode & 0o777)
            message = f"gpu-scheduler {head} (argocd-e2e)"
        else:
            for path, text in (files or {}).items():
                (self.work / path).parent.mkdir(parents=True, exist_ok=True)
                (self.work / path).write_text(text)
            message = f"{name} (argocd-e2e)"
        git("init", "--quiet", "--initial-branch", BRANCH, cwd=self.work)
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "--allow-empty", "--message", message, cwd=self.work)
        self.served.mkdir(exist_ok=True)
        # Its HEAD names BRANCH: Argo CD's revision HEAD is the default branch.
        git("init", "--quiet", "--bare", "--initial-branch", BRANCH, self.bare, cwd=self.served)
        git("remote", "add", "origin", self.bare, cwd=self.work)
        self.push()

    def head(self) -> str:
        return git("rev-parse", "HEAD", cwd=self.work).strip()

    def commit(self, message: str) -> str:
        """Commit every change of the work tree, new files too, and push it; the new commit's hash."""
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "--message", message, cwd=self.work)
        self.push()
        return self.head()

    def push(self) -> None:
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{BRANCH}", cwd=self.work)

    def tag(self, name: str) -> str:
        """Tag HEAD as a release is tagged and push the tag; the commit it names."""
        git("tag", "--annotate", "--message", f"release {name}", name, cwd=self.work)
        git("push", "--quiet", "origin", f"refs/tags/{name}", cwd=self.work)
        return self.head()


class GitDaemon:
    """`git daemon` serving `base` read-only on address:port, until stop()."""

    def __init__(self, base: Path, address: str, log: Path):
        self.address = address
        self.port = free_port(address)
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    "git",
                    "daemon",
                    "--reuseaddr",
                    "--export-all",
                    "--informative-errors",
                    f"--base-path={base}",
                    f"--listen={address}",
                    f"--port={self.port}",
                    str(base),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LC_ALL": "C"},
            )
        self._wait_listening()

    def url(self, name: str = NAME) -> str:
        return f"git://{self.address}:{self.port}/{name}"

    def _wait_listening(self) -> None:
        def probe() -> None:
            socket.create_connection((self.address, self.port), timeout=1).close()

        wait_answering(self.process, self.log, f"git daemon on {self.address}:{self.port}", probe)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
