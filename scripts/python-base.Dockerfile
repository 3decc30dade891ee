# The Python base of our images on machines that cannot pull the upstream
# python:3.11 image (ours): Debian bookworm's own python3 (3.11) on the
# offline Debian image of scripts/debian-base.sh. scripts/images.sh builds it
# once (no context: `docker build - < this file`) and tags it by a hash of
# this file and the Debian image. Only python3: no pip, no ensurepip, no
# compiler; the image builds make their venvs with --without-pip.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ARG DEBIAN_MIRROR=http://deb.debian.org/debian
# The Debian image has the release only; Python's fixes come through
# bookworm-updates and the security archive. Versions are not pinned: the
# mirror carries only the current ones, and the tag changes with this file.
# hadolint ignore=DL3008
RUN printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s-security bookworm-security main\n' \
        "$DEBIAN_MIRROR" "$DEBIAN_MIRROR" "$DEBIAN_MIRROR" >/etc/apt/sources.list \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
CMD ["python3"]
