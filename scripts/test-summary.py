#!/usr/bin/env python3
"""Counts what one ctest run did, from its JUnit file (ctest --output-junit),
so that a skip is never read as a pass:

    scripts/test-summary.py STAGE JUNIT.xml

prints one line with the tests passed, skipped, disabled and failed, then
each skipped or disabled test with its reason (gtest's GTEST_SKIP message),
then the ctest tests that passed while skipping cases inside them (pytest's
"N skipped", with the reasons that -rs prints). scripts/test.sh prints these
lines again at the end of a run, beside the time of each stage.
"""
import re
import sys
import xml.etree.ElementTree as ET

# gtest: "file.cc:12: Skipped" then the reason on the next line(s).
_GTEST_SKIP = re.compile(r": Skipped\n(.+)")
# pytest -rs: "SKIPPED [2] tests/x.py:10: reason" (kolorun prefixes "[r]<stdout>:").
_PYTEST_REASON = re.compile(r"SKIPPED \[(\d+)\] [^:\n]+:\d+: (.+)")
_PYTEST_COUNT = re.compile(r"\b(\d+) passed\b[^\n]*?\b(\d+) skipped\b")


def _reason(output):
    m = _GTEST_SKIP.search(output)
    return m.group(1).strip() if m else "no reason printed"


def _inner_skips(output):
    """(skipped cases, {reason: count}) of one pytest run; rank 0's figures
    when kolorun ran it on several ranks (every rank runs the same cases)."""
    lines = [l for l in output.splitlines() if not re.match(r"\[[1-9]\d*\]<", l)]
    text = "\n".join(lines)
    counts = [int(m.group(2)) for m in _PYTEST_COUNT.finditer(text)]
    reasons = {}
    for m in _PYTEST_REASON.finditer(text):
        reasons[m.group(2).strip()] = reasons.get(m.group(2).strip(), 0) + int(m.group(1))
    return (counts[-1] if counts else 0), reasons


def main(stage, path):
    cases = ET.parse(path).getroot().iter("testcase")
    passed, skipped, disabled, failed, inner = [], [], [], [], []
    for case in cases:
        name, status = case.get("name"), case.get("status")
        output = case.findtext("system-out") or ""
        if status == "run":
            passed.append(name)
            n, reasons = _inner_skips(output)
            if n:
                inner.append((name, n, reasons))
        elif status == "disabled":
            disabled.append((name, "disabled in ctest"))
        elif status == "notrun":
            skipped.append((name, _reason(output)))
        else:
            failed.append(name)
    print("%s: %d tests: %d passed, %d skipped, %d disabled, %d failed"
          % (stage, len(passed) + len(skipped) + len(disabled) + len(failed), len(passed),
             len(skipped), len(disabled), len(failed)))
    for name, why in skipped + disabled:
        print("  skipped %s: %s" % (name, why[:200]))
    for name, n, reasons in inner:
        said = "; ".join("%s (%d)" % (r[:120], c) for r, c in sorted(reasons.items()))
        print("  passed with %d cases skipped inside: %s%s" % (n, name, ": " + said if said else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
