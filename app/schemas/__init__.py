"""Pydantic request/response schemas of the REST API."""
