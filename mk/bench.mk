# Benchmarks on the local control plane: gpu-scheduler vs kube-scheduler vs a bare binder.
# Sizes: BENCH_PODS, BENCH_NODES, BENCH_RUNS, ... (see `python -m bench.run --help`); report in BENCH_OUT.
.PHONY: bench

bench: install ## throughput, latency, admission and memory vs kube-scheduler (QUICK=1: ~3 min); report in .cache/bench/latest
	CACHE_DIR=$(abspath $(CACHE)) bash bench/tools.sh
	$(if $(filter-out 0,$(QUICK)),QUICK=1,QUICK=) $(PY) -m bench.run
