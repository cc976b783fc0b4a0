"""Simplicity bias: the effective rank of what a network computes falls with depth (Huh thesis, chapter 2)."""
