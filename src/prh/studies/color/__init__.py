"""PRH section 4, Fig 8 and appendix D: colour embeddings from co-occurrence (PMI), and contrastive learners converging to the PMI kernel."""
