#!/usr/bin/env bash
# Builds the fake NVML library (fake_nvml.c) as OUT_DIR/libnvidia-ml.so.1 and
# prints its path.
#
#   bash tests/fake_nvml/build.sh [OUT_DIR]
#
# OUT_DIR defaults to ${CACHE_DIR:-<repo>/.cache}/fake-nvml. A stamp next to
# the library holds the sha256 of the source and the compiler flags; when it
# matches, the build is skipped.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:-${CACHE_DIR:-$repo/.cache}/fake-nvml}"
source_file="$here/fake_nvml.c"
library="$out_dir/libnvidia-ml.so.1"
stamp="$out_dir/libnvidia-ml.so.1.sha256"

if ! command -v gcc >/dev/null 2>&1; then
    echo "build.sh: gcc not found; install gcc (e.g. apt-get install gcc) to build the fake NVML library" >&2
    exit 1
fi

# -fvisibility=hidden: only the functions marked EXPORT (the NVML API) are
# exported. The soname matches the real library's, which pynvml loads by name.
flags=(-std=c11 -shared -fPIC -O2 -Wall -Wextra -Werror -fvisibility=hidden -pthread
    -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined)

# The flags are in the stamp so that changing them here rebuilds too.
want="$({ cat "$source_file"; printf '%s\n' "${flags[@]}"; } | sha256sum | cut -d' ' -f1)"
if [[ -f "$library" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$library"
    exit 0
fi

mkdir -p "$out_dir"
# Built under a temporary name and renamed: a process loading the library
# meanwhile sees the old file or the new one, never half of one.
tmp="$(mktemp "$out_dir/.libnvidia-ml.so.1.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
gcc "${flags[@]}" -o "$tmp" "$source_file"
chmod 0755 "$tmp"
mv -f "$tmp" "$library"
printf '%s\n' "$want" >"$stamp"
echo "$library"
