"""Transactional clients and broker-level transaction tools: producers, raw transactions, the scenario."""
