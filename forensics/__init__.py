"""Incident services over the runtime ports: freeze, reconcile, failure facts and signatures,
regression cases, report gathering and rendering."""
