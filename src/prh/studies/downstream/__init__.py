"""PRH section 2.5, Fig 4: alignment against downstream scores (HellaSwag, GSM8K or the offline multiple choice)."""
