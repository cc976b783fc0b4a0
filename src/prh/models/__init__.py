"""Model loaders (``hub``) and the offline zoo (``vision_zoo``, ``train_vision`` and the language trainers)."""
