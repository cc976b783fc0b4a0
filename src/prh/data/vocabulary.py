"""The shapes world's vocabulary: what a scene can hold, shared by images, captions and tasks."""

from __future__ import annotations

__all__ = ["SHAPES", "COLORS", "BACKGROUNDS", "SIZES", "MAX_OBJECTS"]

SHAPES = ("circle", "square", "triangle", "diamond", "hexagon", "star", "cross")


COLORS = {  # name -> sRGB, chosen to be told apart on every background
    "red": (220, 40, 40),
    "orange": (245, 140, 20),
    "yellow": (240, 220, 40),
    "green": (40, 170, 60),
    "cyan": (40, 200, 220),
    "blue": (40, 80, 225),
    "purple": (150, 50, 170),
    "pink": (245, 130, 200),
    "brown": (135, 85, 40),
}


BACKGROUNDS = {"black": (15, 15, 15), "grey": (128, 128, 128), "white": (245, 245, 245), "navy": (20, 30, 80)}


SIZES = ("small", "medium", "large")


MAX_OBJECTS = 4
