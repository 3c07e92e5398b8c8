"""Privacy operations (rule 17): redaction set-up, raw reads with audit, legal holds,
retention sweep, deletion propagation."""
