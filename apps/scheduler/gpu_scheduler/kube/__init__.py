"""Adapters to the Kubernetes API: raw-JSON client, watches, binding, Events, leader election."""
