"""The stand-in hub: every hub item the paper suite names, built locally at tiny sizes.

The paper suite loads checkpoints and datasets from the Hugging Face hub; no machine of this
project reaches it. ``prh standin-hub`` writes, for every hub item of a config
(``prh.pin.hub_entries``: the list the pin check, the cache check and the plan read), a stand-in
into a local Hugging Face cache, so that the paper DAG runs offline (``HF_HUB_OFFLINE=1``) through
the same loaders, rules and commands as a real run:

- ``prh.standin.models``: models and tokenizers (same architecture class, config keys, tokenizer
  kind; tiny widths, seeded random weights);
- ``prh.standin.datasets``: datasets in their real formats (parquet, webdataset tars) with the
  columns ``workflow/resources/hub_manifest.yaml`` records, a few dozen rows, plus the downloads the
  ``prepare_*`` rules read;
- ``prh.standin.cache``: the cache layout.

Every stand-in says so in its config or card (``STANDIN_NOTE``).
"""
