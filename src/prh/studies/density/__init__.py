"""PRH section 6, Fig 9 and appendix E: alignment against caption density."""
