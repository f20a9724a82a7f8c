"""Tenants, their API keys and their quotas."""
