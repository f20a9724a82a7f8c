"""Webhooks: endpoints, where they may point, the delivery outbox and its sending."""
