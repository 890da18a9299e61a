"""Weight sync over a store: ``publish`` writes anchors, deltas and an index to a
directory that any static HTTP server or object store can serve; ``pull`` brings a
standby's checkpoint to a generation by downloading the cheapest route, verifying
every byte, and swapping it in atomically. The two sides never talk to each other.

The delta format and its apply live one layer down, in ``compiler.weights``.
"""
