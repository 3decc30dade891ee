"""The served snapshot of a checkout (no cluster: runs with the unit tests).

CI once failed every Argo CD test before anything was served: a new file whose
name was random bytes sat in the checkout, and `git ls-files` read as UTF-8 text
raised UnicodeDecodeError.
"""

from __future__ import annotations

import os
import subprocess

from .gitserver import ServedRepository, snapshot_of

ODD_NAME = b"K\xfc\xfeI\xc6\x9cB5"


def make_checkout(root):
    checkout = root / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "--quiet", checkout], check=True)
    (checkout / "tracked.txt").write_text("committed\n")
    subprocess.run(["git", "add", "tracked.txt"], cwd=checkout, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "--quiet", "-m", "one"],
        cwd=checkout,
        check=True,
    )
    (checkout / ".gitignore").write_text("ignored.txt\n")
    (checkout / "ignored.txt").write_text("never served\n")
    with open(os.path.join(os.fsencode(checkout), ODD_NAME), "wb") as odd:
        odd.write(b"new, not UTF-8 named\n")
    return checkout


def test_a_file_named_with_bytes_that_are_not_utf8_is_served_as_it_is(tmp_path):
    checkout = make_checkout(tmp_path)

    files, head = snapshot_of(checkout)

    assert files == [".gitignore", os.fsdecode(ODD_NAME), "tracked.txt"]
    assert head.endswith("plus uncommitted changes")
    served = ServedRepository(tmp_path / "served-root", checkout)
    with open(os.path.join(os.fsencode(served.work), ODD_NAME), "rb") as copied:
        assert copied.read() == b"new, not UTF-8 named\n"
    assert not (served.work / "ignored.txt").exists()


def test_the_served_head_is_the_branch_and_tags_reach_the_server(tmp_path):
    """Argo CD's revision HEAD is the served repository's default branch; a release is its tag."""
    served = ServedRepository(tmp_path / "served-root", make_checkout(tmp_path))

    def remote(ref):
        listed = subprocess.run(["git", "ls-remote", served.bare, ref], capture_output=True, text=True, check=True)
        return listed.stdout.split()[0] if listed.stdout else None

    first = served.head()
    assert remote("HEAD") == first
    assert served.tag("v0.1.0") == first
    (served.work / "tracked.txt").write_text("changed\n")
    second = served.commit("two")
    assert remote("HEAD") == second != first
    assert remote("refs/tags/v0.1.0^{}") == first
