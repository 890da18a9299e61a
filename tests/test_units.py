"""Units: parsed once, bits and bytes never confused, Cilium gets a real quantity."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler import units
from tests.conftest import OUT, REPO, golden_trees

# Kubernetes resource.Quantity grammar (decimal SI and binary suffixes, no units).
QUANTITY = re.compile(r"^(?P<num>[0-9]+(\.[0-9]*)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
SUFFIX = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity_value(text: str) -> Decimal:
    match = QUANTITY.match(text)
    assert match, f"{text!r} is not a Kubernetes quantity"
    return Decimal(match["num"]) * SUFFIX[match["suffix"] or ""]


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("25Gbit/s", 25 * 10**9),
        ("25Gbps", 25 * 10**9),
        ("25 Gb/s", 25 * 10**9),
        ("500Mbit/s", 500 * 10**6),
        ("1.25GB/s", 10 * 10**9),  # bytes: x 8
        ("3GBps", 24 * 10**9),
        ("1Gibit/s", 2**30),
        ("2.5Gbit/s", 2_500_000_000),
    ],
)
def test_bandwidth(text: str, bits: int) -> None:
    assert units.parse_bandwidth(text) == bits


@pytest.mark.parametrize(
    "text", ["25", "25G", "25Gbs", "25 gbit/s", "-1Gbit/s", "0bit/s", "1.5bit/s"]
)
def test_bad_bandwidth(text: str) -> None:
    with pytest.raises(units.UnitError):
        units.parse_bandwidth(text)


def test_bare_number_bandwidth_is_refused() -> None:
    with pytest.raises(units.UnitError, match="expected a bandwidth string"):
        units.parse_bandwidth(25_000_000_000)


@pytest.mark.parametrize(
    ("text", "size"), [("14GiB", 14 * 2**30), ("14GB", 14 * 10**9), ("2KiB", 2048), ("512B", 512)]
)
def test_size(text: str, size: int) -> None:
    assert units.parse_size(text) == size


def test_size_in_bits_is_refused() -> None:
    with pytest.raises(units.UnitError, match="is in bits"):
        units.parse_size("14Gb")


@pytest.mark.parametrize(
    ("text", "ms"), [("300ms", 300), ("60s", 60_000), ("5m", 300_000), ("1h30m", 5_400_000)]
)
def test_duration(text: str, ms: int) -> None:
    assert units.parse_duration(text) == ms


@pytest.mark.parametrize(
    ("ms", "text"), [(300_000, "5m"), (90_000, "1m30s"), (60_000, "1m"), (1500, "1500ms")]
)
def test_prom_duration(ms: int, text: str) -> None:
    assert units.prom_duration(ms) == text


@pytest.mark.parametrize(
    ("bits", "text"), [(25 * 10**9, "25G"), (2_500_000_000, "2500M"), (12_345, "12345")]
)
def test_k8s_quantity(bits: int, text: str) -> None:
    assert units.k8s_quantity(bits) == text
    assert quantity_value(text) == bits


def test_seed_full_copy_time() -> None:
    # facts.md: 42 GiB = 45.1 GB = 360.8 Gbit -> 3.61 s at 100 Gbit/s, not 3.5 s.
    bits = 3 * units.parse_size("14GiB") * 8
    assert round(bits / units.parse_bandwidth("100Gbit/s"), 2) == 3.61


def _emitted_bandwidths() -> list[tuple[str, str, int]]:
    """(file, emitted quantity, tier egress from the spec) for every golden tree."""
    yaml = YAML(typ="safe")
    found = []
    for spec_path, tree in golden_trees():
        spec = yaml.load(spec_path.read_text())
        tiers = spec.get("spec", {}).get("tiers", {})
        defaults = {"hot": "25Gbit/s", "warm": "10Gbit/s", "cold": "5Gbit/s"}
        meta = spec["metadata"]
        policies = tree / meta.get("namespace", "default") / meta["name"]
        for path in sorted(policies.rglob("clusterpolicy-*.yaml")):
            policy = yaml.load(path.read_text())
            for rule in policy["spec"]["rules"]:
                tier = rule["name"].removeprefix("egress-")
                note = rule["mutate"]["patchStrategicMerge"]["metadata"]["annotations"]
                egress = tiers.get(tier, {}).get("egress", defaults[tier])
                found.append(
                    (
                        str(path.relative_to(REPO)),
                        note["kubernetes.io/egress-bandwidth"],
                        units.parse_bandwidth(egress),
                    )
                )
    return found


@pytest.mark.parametrize(("path", "quantity", "bits"), _emitted_bandwidths())
def test_emitted_egress_parses_as_a_quantity_in_bits(path: str, quantity: str, bits: int) -> None:
    assert quantity_value(quantity) == bits, path


def test_emitted_priorities_are_cilium_classes() -> None:
    yaml = YAML(typ="safe")
    policy = next((OUT / "inference-system").rglob("clusterpolicy-*.yaml"))
    rules = yaml.load(Path(policy).read_text())["spec"]["rules"]
    got = {
        r["name"]: r["mutate"]["patchStrategicMerge"]["metadata"]["annotations"][
            "bandwidth.cilium.io/priority"
        ]
        for r in rules
    }
    assert got == {
        "egress-hot": "guaranteed",
        "egress-warm": "burstable",
        "egress-cold": "besteffort",
    }
