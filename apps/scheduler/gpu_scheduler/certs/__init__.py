"""The webhook's CA and serving certificate: generate, check, write to files or a Secret."""

from .bundle import (
    CertBundle,
    generate_bundle,
    reuse_problem,
    service_dns_names,
    subject_alt_names,
)

__all__ = [
    "CertBundle",
    "generate_bundle",
    "reuse_problem",
    "service_dns_names",
    "subject_alt_names",
]
