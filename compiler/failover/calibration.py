"""Rates of standbyc's own work, measured, for the plan's defaults: what the publisher
writes per second, what a sync receives and rebuilds a model directory at, what signing and
a signature check hash at. ``bench/plan_calibration.py`` (``make bench``) measures them
again, and tests/sync/test_plan_calibration.py holds a real multi-GiB sync to the plan
within a stated factor.

Measured on 2026-12-07 on 2 shared cores and a local ext4 disk, the slowest machine
standbyc is tested on, with a 3 GiB (3.22 GB) bf16 model in 3 shards, 2% of its elements
changed, through nginx on loopback: two runs of the bench, 3 rounds each, and for each rate
the slower of the two medians, since a plan errs long. A sync is about twice as fast on a
node whose page cache is empty than on one whose page cache is full (3.1 s against 7.3 s for
a 2 GiB rebuild, measured here): these are a full cache's, as on a node that serves. In the
same runs `cp -r` of the directory took 0.69-1.36 GB/s and `cat` 1.9-2.2 GB/s."""

from __future__ import annotations

from compiler.failover.numbers import Num

WHERE = "measured: bench/plan_calibration.py, 3 GiB on 2 cores"

# The publisher writes the whole model as a full anchor every generation, plus the delta:
# 5.9-6.0 s for 3.22 GB.
PUBLISH = Num(0.54e9, "B/s", "default", f"the publisher's rate, {WHERE}")
# Signing (publish --sign-key) hashes the model once more: 2.9-5.3 s more for 3.22 GB.
SIGN = Num(0.61e9, "B/s", "default", f"the publisher's signing, {WHERE}")
# A sync writes and hashes what it receives as it downloads: 5.2-12.3 s for a new
# standby's whole model at a 12.5 Gbit/s limit the network never reached.
RECEIVE = Num(0.26e9, "B/s", "default", f"a sync's download, written and hashed, {WHERE}")
# A sync rebuilds the whole model directory from the one it holds and the delta, verifying
# every file's hash: 5.1-11.8 s for 3.22 GB. It grows with the model, not the delta.
REBUILD = Num(0.27e9, "B/s", "default", f"the sync's rebuild, {WHERE}")
# A new standby's downloaded directory checked and swapped in: 0.17-0.19 s for 3.22 GB.
PLACE = Num(17e9, "B/s", "default", f"a new standby's swap, {WHERE}")
# OpenSSF Model Signing's verify of the staged directory: 0.45-0.59 s for 3.22 GB.
VERIFY = Num(5.4e9, "B/s", "default", f"model-signing's verify, {WHERE}")
