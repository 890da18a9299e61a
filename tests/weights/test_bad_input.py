"""Bad input is refused with exit 2 and an exact message; the base stays untouched."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash

from compiler.cli import main
from compiler.weights.apply import apply
from compiler.weights.deltafile import PREAMBLE
from compiler.weights.encode import OPS
from compiler.weights.errors import DeltaError
from tests.weights.conftest import Pair, sha256


def refuse(base: Path, delta: Path, capsys: pytest.CaptureFixture[str]) -> str:
    before = sha256(base)
    out = base.parent / "out.safetensors"
    capsys.readouterr()
    assert main(["weights", "apply", str(base), str(delta), "-o", str(out)]) == 2
    assert not out.exists()
    assert main(["weights", "apply", str(base), str(delta), "--in-place"]) == 2
    assert sha256(base) == before
    assert [p.name for p in base.parent.iterdir() if "standbyc-tmp" in p.name] == []
    err = capsys.readouterr().err
    return err.splitlines()[0].removeprefix("standbyc: ")


@pytest.fixture
def setup(pairs: dict[str, Pair], tmp_path: Path) -> tuple[Path, Path, bytes]:
    p = pairs["rl_bf16"]
    base = tmp_path / "base.safetensors"
    base.write_bytes(p.old.read_bytes())
    delta = tmp_path / "good.delta"
    assert main(["weights", "diff", str(p.old), str(p.new), "-o", str(delta)]) == 0
    return base, delta, delta.read_bytes()


def rewrite(raw: bytes, edit: Callable[[dict[str, object]], None]) -> bytes:
    """Edit the header JSON and re-seal it with valid checksums (tests the bounds checks)."""
    pre = PREAMBLE.unpack(raw[:64])
    hlen, plen = pre[4], pre[5]
    doc = json.loads(raw[64 : 64 + hlen])
    edit(doc)
    header = json.dumps(doc).encode()
    payload = raw[64 + hlen :]
    return (
        PREAMBLE.pack(
            pre[0],
            pre[1],
            pre[2],
            pre[3],
            len(header),
            plen,
            xxhash.xxh3_128_digest(header),
            pre[7],
        )
        + header
        + payload
    )


def test_truncated_delta(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup
    delta.write_bytes(raw[:-100])
    assert refuse(base, delta, capsys) == (
        f"{delta}: truncated: preamble declares {len(raw)} bytes, file has {len(raw) - 100}"
    )
    delta.write_bytes(raw[:40])
    assert refuse(base, delta, capsys) == (
        f"{delta}: truncated: 40 bytes is shorter than the preamble"
    )


def test_flipped_header_byte(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup
    for pos in (64, 64 + 200, 35):  # header start, header middle, header checksum
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        delta.write_bytes(bad)
        assert refuse(base, delta, capsys) == (
            f"{delta}: header checksum mismatch (corrupted header)"
        )


def test_flipped_payload_byte(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup
    for pos in (len(raw) - 1, len(raw) - 5000):
        bad = bytearray(raw)
        bad[pos] ^= 0x80
        delta.write_bytes(bad)
        assert refuse(base, delta, capsys) == (
            f"{delta}: payload checksum mismatch (corrupted payload)"
        )


def test_delta_for_another_base(
    pairs: dict[str, Pair], setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, _ = setup
    base.write_bytes(pairs["rl_bf16"].new.read_bytes())
    msg = refuse(base, delta, capsys)
    assert re.fullmatch(
        rf"{re.escape(str(base))}: tensor 'embed\.weight' has hash [0-9a-f]{{32}}, "
        r"the delta's base has [0-9a-f]{32}: this delta is for another base",
        msg,
    ), msg


def test_same_tensors_other_metadata_is_another_base(
    pairs: dict[str, Pair], setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, _ = setup
    raw = base.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8 : 8 + n].replace(b'"step":"0"', b'"step":"9"')
    base.write_bytes(raw[:8] + header + raw[8 + n :])
    assert refuse(base, delta, capsys).startswith(f"{base}: base digest ")


def test_header_claiming_huge_sizes(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup
    bad = bytearray(raw)
    bad[16:24] = (1 << 40).to_bytes(8, "little")
    delta.write_bytes(bad)
    assert refuse(base, delta, capsys) == (
        f"{delta}: header length 1099511627776 exceeds the 268435456 cap"
    )
    bad = bytearray(raw)
    bad[24:32] = (1 << 60).to_bytes(8, "little")
    delta.write_bytes(bad)
    assert refuse(base, delta, capsys) == (
        f"{delta}: payload length 1152921504606846976 exceeds the 17592186044416 cap"
    )


def test_section_out_of_range(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup

    hit: list[tuple[int, str, int]] = []

    def grow_last_section(doc: dict[str, object]) -> None:
        tensors = doc["tensors"]  # type: ignore[assignment]
        i = max(i for i, t in enumerate(tensors) if t["chunks"] != "copy")  # type: ignore[arg-type]
        t = tensors[i]  # type: ignore[index]
        t["chunks"][-1][1] += 10
        hit.append((i, t["name"], len(t["chunks"]) - 1))

    delta.write_bytes(rewrite(raw, grow_last_section))
    msg = refuse(base, delta, capsys)
    i, name, k = hit[0]
    assert re.fullmatch(
        rf"{re.escape(str(delta))}: tensors\[{i}\] \('{re.escape(name)}'\)"
        rf"\.chunks\[{k}\]: section of \d+ bytes at payload offset \d+ runs past the end "
        r"of the payload",
        msg,
    ), msg

    def huge_chunk(doc: dict[str, object]) -> None:
        doc["tensors"][0]["chunks"][0][1] = 1 << 50  # type: ignore[index]

    delta.write_bytes(rewrite(raw, huge_chunk))
    assert refuse(base, delta, capsys) == (
        f"{delta}: tensors[0] ('embed.weight').chunks[0].length: expected an integer in "
        f"[0, {(1 << 20) + (1 << 20) // 128 + 1024}], got {1 << 50}"
    )


def test_sparse_position_out_of_range_is_caught(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, raw = setup

    seen: list[tuple[int, int]] = []

    def more_changes(doc: dict[str, object]) -> None:
        op = doc["tensors"][0]["chunks"][0]  # type: ignore[index]
        assert op[0] == "sp"
        seen.append((op[2], op[3]))
        op[2] += 1

    delta.write_bytes(rewrite(raw, more_changes))
    count, gw = seen[0]
    assert refuse(base, delta, capsys) == (
        f"{delta}: file (single): tensor 'embed.weight' bytes [0, 1048576): "
        f"zstd frame declares {count * gw} bytes, expected {(count + 1) * gw}"
    )


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ([0, 2, 100], "no changed element"),
        ([524289, 2, 100], "more changes than the chunk's 524288 elements"),
        ([10, 3, 100], "a gap width that is not 1, 2, 4 or 8"),
        ([10, 2, 0], "no gaps"),
        ([10, 2, 1 << 30], "gaps longer than the section"),
        ([10, 2], "a parameter missing"),
        ([10, 2, 5, 1], "a parameter too many"),
    ],
)
def test_bad_sparse_planes_parameters_are_refused_before_writing(
    setup: tuple[Path, Path, bytes],
    capsys: pytest.CaptureFixture[str],
    params: list[int],
    why: str,
) -> None:
    base, delta, raw = setup

    def edit(doc: dict[str, object]) -> None:
        op = doc["tensors"][0]["chunks"][0]  # type: ignore[index]
        op[2:] = params

    delta.write_bytes(rewrite(raw, edit))
    where = f"{delta}: tensors[0] ('embed.weight').chunks[0]"
    if len(params) > 3:
        expect = f"{where}: expected [op, length, params...] with op in {list(OPS)}"
    elif len(params) < 3:
        expect = f"{where}: op 'sp' takes 3 parameters"
    else:
        expect = f"{where}: bad sparse parameters {params}"
    assert refuse(base, delta, capsys) == expect, why


def write_st(path: Path, header: dict[str, object], data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            bytes(12),
            "tensor 'b': data_offsets [4, 12] overlap tensor 'a' which ends at 8",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},
            },
            bytes(20),
            "tensor 'b': data_offsets [12, 20] leave a gap of 4 bytes after tensor 'a' "
            "which ends at 8",
        ),
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
            bytes(4),
            "tensors cover 8 bytes of data but the file holds 4 bytes after the header",
        ),
        (
            {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
            bytes(8),
            "tensor 'a': data_offsets [0, 8] span 8 bytes but F32[3] needs 12",
        ),
        (
            {"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}},
            bytes(8),
            "tensor 'a': unsupported dtype 'Q4'",
        ),
    ],
)
def test_bad_safetensors_base(
    header: dict[str, object],
    data: bytes,
    message: str,
    setup: tuple[Path, Path, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, delta, _ = setup
    write_st(base, header, data)
    assert refuse(base, delta, capsys) == f"{base}: {message}"


def test_non_safetensors_base(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base, delta, _ = setup
    base.write_bytes(b"GGUF" + bytes(100))
    assert refuse(base, delta, capsys) == (
        f"{base}: header length 1179993927 exceeds the 100 MB safetensors limit"
    )
    base.write_bytes(bytes([200]) + bytes(103))
    assert refuse(base, delta, capsys) == (
        f"{base}: header length 200 runs past the end of the 104-byte file"
    )
    base.write_bytes(b"\x04\x00\x00\x00\x00\x00\x00\x00abcdxyz")
    assert refuse(base, delta, capsys) == f"{base}: not a safetensors file: header is not JSON"
    base.write_bytes(b"\xff" * 8 + b"{}")
    assert refuse(base, delta, capsys) == (
        f"{base}: header length 18446744073709551615 exceeds the 100 MB safetensors limit"
    )


def test_diff_refuses_bad_new(
    setup: tuple[Path, Path, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, _ = setup
    bad = tmp_path / "bad.safetensors"
    write_st(bad, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a2": 5}, bytes(8))
    capsys.readouterr()
    assert main(["weights", "diff", str(base), str(bad), "-o", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == (
        f"standbyc: {bad}: tensor 'a2': entry must have exactly dtype, shape and data_offsets\n"
    )
    assert not (tmp_path / "x").exists()


def test_rebuilt_bytes_must_match_the_declared_tensor_hash(
    setup: tuple[Path, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """Checksums intact, but a tensor rebuilds to other bytes than declared: refused."""
    base, delta, raw = setup
    fake = "0" * 32

    def lie(doc: dict[str, object]) -> None:
        doc["tensors"][0]["xxh128"] = fake  # type: ignore[index]

    delta.write_bytes(rewrite(raw, lie))
    msg = refuse(base, delta, capsys)
    assert re.fullmatch(
        rf"{re.escape(str(delta))}: file \(single\): tensor 'embed\.weight' rebuilt with "
        rf"hash [0-9a-f]{{32}}, the delta says {fake}",
        msg,
    ), msg


def test_base_changed_during_apply_is_refused(setup: tuple[Path, Path, bytes]) -> None:
    """The base is touched after its check, while apply copies from it: no output."""
    base, delta, _ = setup
    out = base.parent / "out.safetensors"
    size = base.stat().st_size
    seen = 0

    def touch_base_once_writing(n: int) -> None:
        nonlocal seen
        before, seen = seen, seen + n
        if before < size <= seen:  # the base check is done; writing starts now
            os.utime(base, ns=(1, 1))

    with pytest.raises(DeltaError, match=r"the base changed while the delta was applied$"):
        apply(base, delta, out, progress=touch_base_once_writing)
    assert not out.exists()
    assert [p.name for p in base.parent.iterdir() if "standbyc-tmp" in p.name] == []


def test_not_enough_space_is_refused_before_writing(
    setup: tuple[Path, Path, bytes],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, delta, _ = setup
    real = os.statvfs(base.parent)

    class Full:
        f_bavail, f_frsize = 10, real.f_frsize

    monkeypatch.setattr("compiler.weights.apply.os.statvfs", lambda _p: Full)
    msg = refuse(base, delta, capsys)
    assert re.fullmatch(
        rf".*: the target needs \d+ bytes, the filesystem has {10 * real.f_frsize} free; "
        "nothing was written",
        msg,
    ), msg
