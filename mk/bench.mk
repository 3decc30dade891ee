# Benchmarks on the local control plane: gpu-scheduler vs kube-scheduler vs two bare binders (docs/benchmarks.md).
# Sizes: BENCH_PODS, BENCH_NODES, BENCH_RUNS, ... (see `python -m bench.run --help`); report in BENCH_OUT.
.PHONY: bench

bench: install ## gpu-scheduler vs kube-scheduler: throughput, latency, admission, memory (~12 min; QUICK=1: 2-3 min)
	CACHE_DIR=$(abspath $(CACHE)) bash bench/tools.sh
	$(if $(filter-out 0,$(QUICK)),QUICK=1,QUICK=) $(PY) -m bench.run
