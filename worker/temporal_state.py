"""Whether this process opened a Temporal client (the CLI then skips interpreter teardown)."""

client_used = False
