"""Record the numbers of a smoke run as tests/smoke/expected_numbers.json.

    python tests/smoke/record_numbers.py <repository copy or results dir of a smoke run>

Run it only after a change that is meant to move results, and say why in the commit. The
recording holds this machine's ``float_signature``; the test compares every number only on a
machine with the same one, and the PORTABLE ones (no training touches them) on any (tests/smoke_numbers.py).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smoke_numbers import float_signature, smoke_numbers

root = Path(sys.argv[1])
results = root / "results" if (root / "results").is_dir() else root
out = Path(__file__).with_name("expected_numbers.json")
recording = {"float_signature": float_signature(), "numbers": smoke_numbers(results)}
out.write_text(json.dumps(recording, indent=1, sort_keys=True, allow_nan=True) + "\n")
print(f"wrote {out} from {results}")
