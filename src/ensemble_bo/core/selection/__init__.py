"""Choosing an ensemble from a pool: the greedy algorithms on arrays (greedy)
and the stages that turn a search's pool into its final ensemble (stages)."""
