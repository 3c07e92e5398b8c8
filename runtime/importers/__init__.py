"""Importers of foreign agent-run formats, each a converter to the ingestion format."""
