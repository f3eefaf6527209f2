"""A transactional canary (issue 15): a probe that proves, every few seconds, that a
transaction can commit and become visible to read_committed consumers."""
