"""Imani, Hu and White, "Representation Alignment in Neural Networks" (TMLR; ../shared/seeds/004_*.txt): the alignment curve, its emergence under shuffled labels, and the peaks transfer task."""
