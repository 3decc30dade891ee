# Stages of `make test`, timed: source it; don't run it.
# shellcheck shell=bash
#
#   stage ID "TITLE" CMD...   run CMD as one stage: a header with the run's
#                             elapsed time, then CMD with JUNIT_DIR set so that
#                             every pytest run in it writes its JUnit report
#                             under $STAGES_DIR/junit/ID; one line in
#                             $STAGES_DIR/stages.tsv (id, title, start, end,
#                             exit status). Returns CMD's status.
#   stage_table               the table of every stage so far (seconds, tests
#                             passed), also written to .cache/test-times.json
#
# Stages may run in two lanes at once (scripts/test.sh): each appends its own
# line when it ends, so the table lists them in the order they ended.

STAGES_DIR="${STAGES_DIR:-$PWD/.cache/test-stages}"
STAGES_STARTED=$SECONDS

stages_reset() {
  rm -rf "$STAGES_DIR"
  mkdir -p "$STAGES_DIR/junit"
  : >"$STAGES_DIR/stages.tsv"
}

stage() {
  local id="$1" title="$2" start=$((SECONDS - STAGES_STARTED)) status=0
  shift 2
  printf '\n==> %s (%ds)\n' "$title" "$start"
  mkdir -p "$STAGES_DIR/junit/$id"
  JUNIT_DIR="$STAGES_DIR/junit/$id" "$@" || status=$?
  printf '%s\t%s\t%d\t%d\t%d\n' "$id" "$title" "$start" $((SECONDS - STAGES_STARTED)) "$status" >>"$STAGES_DIR/stages.tsv"
  printf '==> %s: %s in %ds\n' "$title" "$( ((status == 0)) && echo passed || echo "FAILED (exit $status)")" \
    $((SECONDS - STAGES_STARTED - start))
  return "$status"
}

stage_table() {
  printf '\n==> the stages of this run (%ds in all)\n' $((SECONDS - STAGES_STARTED))
  python3 scripts/test-times.py "$STAGES_DIR" .cache/test-times.json $((SECONDS - STAGES_STARTED)) || true
}
