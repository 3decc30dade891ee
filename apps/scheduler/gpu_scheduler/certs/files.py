"""Write a bundle to a directory, the way a mounted kubernetes.io/tls Secret looks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .bundle import CertBundle

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file and rename.

    mkstemp creates the file with mode 0600 before a byte is written, so a key
    is never readable by others, not even for a moment and not when an older,
    wider-permissioned file is in the way (the rename replaces it). The rename
    also means a running webhook never reads a half-written file.
    """
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            if mode != 0o600:
                os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def write_bundle(out_dir: str | os.PathLike, bundle: CertBundle) -> None:
    """ca.crt and tls.crt (0644), tls.key (0600); creates the directory (0700)."""
    directory = Path(out_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_atomically(directory / CA_FILE, bundle.ca_cert_pem, 0o644)
    _write_atomically(directory / KEY_FILE, bundle.tls_key_pem, 0o600)
    _write_atomically(directory / CERT_FILE, bundle.tls_cert_pem, 0o644)
