"""Studies of the seed documents (../shared/seeds/): one package per source document."""
