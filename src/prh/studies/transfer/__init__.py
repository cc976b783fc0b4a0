"""Imani, Hu and White, "Representation Alignment in Neural Networks" (TMLR; docs/sources.md): the alignment curve, its emergence under shuffled labels, and the peaks transfer task."""
