# `make help`: the targets of the Makefile and mk/*.mk in three groups, by the
# tag of their comment: `## ` (using gpu-scheduler: what a user runs),
# `##dev ` (developing it: tests, lint, the local pipeline) and `##offline `
# (what machines without internet build for themselves instead of
# downloading it). The user's way in comes first, in the order it is taken.
BEGIN {
  first = "demo test kind-up e2e argocd-e2e report kind-down"
  n = split(first, order, " ")
  for (i = 1; i <= n; i++) rank[order[i]] = i
  title["use"] = "Try it and use it:"
  title["dev"] = "Develop it (tests, lint, the GitLab pipeline run locally):"
  title["offline"] = "Machinery for machines without internet (built here instead of downloaded):"
}
match($0, /^[a-z][a-z0-9-]+:.*##(dev|offline)? /) {
  target = substr($0, 1, index($0, ":") - 1)
  rest = substr($0, index($0, "##") + 2)
  group = "use"
  if (rest ~ /^dev /) { group = "dev"; rest = substr(rest, 5) }
  else if (rest ~ /^offline /) { group = "offline"; rest = substr(rest, 9) }
  sub(/^ /, "", rest)
  # Sort key: the ranked entries of `first`, then alphabetical.
  key = (target in rank) ? sprintf("%02d", rank[target]) : "99" target
  lines[group, key] = sprintf("  %-16s %s", target, rest)
  keys[group] = keys[group] " " key
}
END {
  split("use dev offline", groups, " ")
  for (g = 1; g <= 3; g++) {
    name = groups[g]
    count = split(keys[name], list, " ")
    # insertion sort: awk has no portable sort
    for (i = 2; i <= count; i++) {
      v = list[i]
      for (j = i - 1; j >= 1 && list[j] > v; j--) list[j + 1] = list[j]
      list[j + 1] = v
    }
    if (g > 1) print ""
    print title[name]
    for (i = 1; i <= count; i++) print lines[name, list[i]]
  }
}
