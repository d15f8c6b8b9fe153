"""w-players: the online learners of the model parameters w."""
