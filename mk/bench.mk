# Benchmarks on the local control plane: gpu-scheduler vs kube-scheduler vs two bare binders (docs/benchmarks.md).
# Sizes: BENCH_PODS, BENCH_NODES, BENCH_RUNS, ... (see `python -m bench.run --help`); report in BENCH_OUT.
# BENCH_STRICT=1: exit 1 when a target of bench/performance-config.yaml is missed or not measured.
# BENCH_RECORD=1: a run of record, kept in docs/bench/ (results and plot); `make bench-readme` writes
# the README's headline and docs/benchmarks.md's tables from the newest ones (or BENCH_RECORDS="docs/bench/a.json ...").

.PHONY: bench bench-scale bench-readme

bench: install ## gpu-scheduler vs kube-scheduler: CPU per pod, throughput, latency, admission, memory; 5 rounds (QUICK=1: one small round, under 5 min)
	CACHE_DIR=$(abspath $(CACHE)) bash bench/tools.sh
	$(if $(filter-out 0,$(QUICK)),QUICK=1,QUICK=) $(PY) -m bench.run

bench-scale: install ## scheduler_perf's scale: BENCH_SCALE_NODES (5,000) KWOK nodes, BENCH_SCALE_PODS (10,000) pods, ours and kube-scheduler side by side, pinned pods and count-line pods, three rounds (about 40 min; not in make test)
	CACHE_DIR=$(abspath $(CACHE)) bash bench/tools.sh
	BENCH_SCALE=1 $(PY) -m bench.run --scale

bench-readme: install ## the benchmark tables of the README (headline) and docs/benchmarks.md (all) from the kept runs of record (BENCH_RECORDS to choose)
	$(PY) -m bench.readme --write README.md --full docs/benchmarks.md $(BENCH_RECORDS)
