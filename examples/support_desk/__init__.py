"""The reference agent: a customer-support desk with simulated CRM, payment and email providers.

Everything here is a SIMULATION for demonstrating and testing Replaybook: the "model" is a
scripted stand-in for an LLM and the providers are tables in the database.
"""
