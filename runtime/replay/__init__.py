"""The replay flavour of the runtime: the same graph and gateways, answered from evidence."""
