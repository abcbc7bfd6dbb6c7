"""What ``inv diff`` reads from one side's labels: the records (mods, verify, probe) through
common.labels.label_record, a label that is not JSON left out with a warning naming it."""

from __future__ import annotations

import json

from edgevllm.common import labels
from edgevllm.inspect.facts import _records_from_labels


def test_records_are_read_from_their_labels_and_bad_json_is_named(capsys):
    found = {labels.MODS: json.dumps([{"name": "m", "outcome": "applied"}]),
             labels.VERIFY: "{not json", labels.TARGET: "spark",
             labels.LOCK: json.dumps({"target": "spark"})}
    records = _records_from_labels(found, "img:1")
    assert records == {"mods": [{"name": "m", "outcome": "applied"}]}
    err = capsys.readouterr().err
    assert f"label {labels.VERIFY} of img:1 is not JSON; left out" in err
    assert labels.PROBE not in err and labels.LOCK not in err
