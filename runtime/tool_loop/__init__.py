"""The generic tool-calling loop that replays ingested and imported chat-with-tools runs."""
