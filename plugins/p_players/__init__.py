"""p-players: the bandit and full-information players of the distribution p."""
