"""Fault-injection and hostile-input suite (marker `faults`): the real scheduler and webhook
processes against the real local control plane, while their processes, the API server, etcd and
nodes fail under them. See docs/faults.md for what each test proves and the results.

A package so that its package-scoped fixtures (the webhook) stop after its last test.
"""
