"""Files of a model directory a sync must take as they are, through nginx:

- a generation holding an empty file (an empty ``.gitattributes``, a placeholder, an empty
  ``added_tokens.json``: ordinary in model repositories) reaches a new standby, one a
  generation behind, and one that verifies the publisher's signature, the empty file as
  an empty file and the rest bit for bit;
- an unsigned generation after a signed one is refused at publish unless asked for;
- a link planted in a standby's model directory is repaired by the next sync."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.sync.conftest import STANDBYC, Nginx, publish, tree_bytes
from tests.sync.signing import ec_key

EMPTY = (".gitattributes", "extra/placeholder.txt")


@pytest.fixture
def model(generations: dict[int, Path], tmp_path: Path) -> dict[int, Path]:
    """Generations 1 and 2 as directories with a config and two empty files each."""
    out = {}
    for g in (1, 2):
        d = tmp_path / f"model-{g}"
        d.mkdir()
        shutil.copyfile(generations[g], d / "model.safetensors")
        (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
        for name in EMPTY:
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(b"")
        out[g] = d
    return out


def _sync(url: str, target: Path, generation: int, *extra: str) -> dict[str, object]:
    proc = subprocess.run(
        [str(STANDBYC), "weights", "sync", "--source", url, "--target", str(target),
         "--generation", str(generation), "--format", "json", *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
def test_a_generation_with_empty_files_reaches_every_standby(
    model: dict[int, Path], nginx: Nginx, tmp_path: Path, signed: bool
) -> None:
    key = ec_key(tmp_path / "publisher.key")
    sign = ["--sign-key", str(key), "--model", "odd"] if signed else []
    verify = ["--verify", "key", "--verify-trust", str(key.with_suffix(".pub"))] if signed else []
    store = nginx.root / "store"
    publish(model[1], store, 1, *sign)
    publish(model[2], store, 2, *sign)
    url = f"{nginx.url}store/"

    fresh = tmp_path / "fresh" / "model"
    assert _sync(url, fresh, 2, *verify)["status"] == "updated"
    behind = tmp_path / "behind" / "model"
    _sync(url, behind, 1, *verify)
    second = _sync(url, behind, 2, *verify)
    assert second["status"] == "updated" and second["previous_generation"] == 1
    # The signature is written into the published directory, and compared by the verify.
    published = {k: v for k, v in tree_bytes(model[2]).items() if k != "model.sig"}
    for target in (fresh, behind):
        got = {k: v for k, v in tree_bytes(target).items() if k != "model.sig"}
        assert got == published
        for name in EMPTY:
            assert (target / name).is_file() and (target / name).stat().st_size == 0


def test_an_unsigned_generation_after_a_signed_one_is_refused_unless_asked(
    model: dict[int, Path], nginx: Nginx, tmp_path: Path
) -> None:
    """Every standby that verifies would refuse it, after downloading it: the publisher is
    told at once, and the store is left as it was."""
    key = ec_key(tmp_path / "publisher.key")
    store = nginx.root / "store"
    publish(model[1], store, 1, "--sign-key", str(key), "--model", "odd")
    index = (store / "index.json").read_bytes()
    unsigned = tmp_path / "unsigned"
    shutil.copytree(model[2], unsigned)
    (unsigned / "model.sig").unlink(missing_ok=True)
    proc = subprocess.run(
        [str(STANDBYC), "weights", "publish", str(unsigned), "--to", str(store),
         "--generation", "2"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "generation 2 is not signed (no model.sig), and the store's latest, 1, is" in (
        proc.stderr
    )
    assert (store / "index.json").read_bytes() == index
    done = publish(unsigned, store, 2, "--allow-unsigned")
    assert done["generation"] == 2


@pytest.mark.parametrize("link", ["../config.json", "../.gitattributes"])
def test_a_link_planted_in_the_model_directory_is_repaired(
    model: dict[int, Path], nginx: Nginx, tmp_path: Path, link: str
) -> None:
    """A relative link planted beside a standby's files, pointing at one of them, is never
    reused and is gone after the next sync, at the same generation or the next one."""
    store = nginx.root / "store"
    publish(model[1], store, 1)
    publish(model[2], store, 2)
    url = f"{nginx.url}store/"
    target = tmp_path / "standby" / "model"
    _sync(url, target, 1)
    planted = target / "extra" / "link.txt"
    for generation, status in ((1, "updated"), (2, "updated"), (2, "current")):
        if status == "updated":
            planted.parent.mkdir(exist_ok=True)
            planted.symlink_to(link)
        doc = _sync(url, target, generation)
        assert doc["status"] == status, doc
        assert not planted.is_symlink()
        assert tree_bytes(target) == tree_bytes(model[generation])
