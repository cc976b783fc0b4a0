"""PRH appendices A-B, Figs 10 and 12-14: the alignment metrics against each other and over the neighbourhood size k."""
