"""PRH section 2, Figs 2-3: vision-vision convergence against competence, language-vision alignment against LM quality, the platonic reference and the pre-registered Fig 3 test."""
