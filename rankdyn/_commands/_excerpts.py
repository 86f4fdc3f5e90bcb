"""``--checkpoint ... --text FILE --batch B``: a text too short for ``--batch`` excerpts, refused before
the weights (and JAX) load, from the tokenizer alone (``tokenizer.json`` or a GGUF file's metadata).

Without an explicit ``--batch``, the default (256 for ``simulate``, 16 for ``lyapunov``) is lowered to
the number of excerpts the text gives, said in one stderr line (`fit_default_batch`); an explicit
``--batch`` the text cannot fill stays a refusal.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .._errors import UsageError

__all__ = [
    "DEFAULT_N",
    "check_files_before_loading",
    "check_inputs_before_loading",
    "count_excerpts_before_loading",
    "excerpts_after_loading",
    "fit_default_batch",
]

#: Tokens per excerpt of a checkpoint run without ``--n``.
DEFAULT_N = 128


def check_files_before_loading(path) -> None:
    """``--checkpoint PATH``: a path that does not exist, a known name that is not installed, or a
    folder without ``config.json`` or ``model.safetensors`` (`_trained._checkpoint_files.check_files`),
    refused from the folder's file names, before JAX and the weights load (the same messages as
    the loader's, which stay).

    Raises:
        UsageError: naming ``--checkpoint`` and the fix.
    """
    from .._trained._checkpoint_files import check_files
    from .._trained._installed import resolve_checkpoint

    try:
        check_files(resolve_checkpoint(path))
    except UsageError as err:  # "checkpoint PATH: ..." -> "--checkpoint PATH: ..."
        raise UsageError(f"--{err}") from None


def check_inputs_before_loading(args) -> None:
    """The input refusals of a checkpoint run that need no weights: exactly one of ``--text`` and
    ``--input-ids``, a ``--text`` that is a readable UTF-8 file, an ``--input-ids`` that NumPy reads.
    The same messages as the checks after loading (`rankdyn._commands._checkpoint._check_inputs`),
    which stay; here they answer before JAX and the weights load (10 s for MiniLM).

    Raises:
        UsageError: naming the flag and the fix.
    """
    if (args.text is None) == (args.input_ids is None):
        raise UsageError("--checkpoint needs exactly one of --text FILE or --input-ids FILE.npy.")
    if args.input_ids is not None:
        import numpy as np

        try:
            np.load(args.input_ids, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(
                f"--input-ids {args.input_ids}: cannot read a .npy array ({err}); save one with numpy.save."
            ) from None
        return
    try:
        data = args.text.read_bytes()
    except OSError as err:
        raise UsageError(
            f"--text {args.text}: cannot read it ({err.strerror or err}); give a text file."
        ) from None
    from .._trained._text_files import utf8_text

    utf8_text(data, f"--text {args.text}")


def fit_default_batch(args, given: dict, excerpts: int, n: int) -> None:
    """Lower a default ``--batch`` to the ``excerpts`` the text gives, with one line on stderr.

    Nothing changes when ``--batch`` was given (``"batch" in given``: the refusal follows), when the
    text fills the default, or when it gives no excerpt at all (refused: there is nothing to run).
    """
    if "batch" in given or not 1 <= excerpts < args.batch:
        return
    print(
        f"--batch: the text gives {excerpts} excerpts of {n} tokens; using --batch {excerpts} "
        "(give --batch to choose)",
        file=sys.stderr,
    )
    args.batch = excerpts


def excerpts_after_loading(args, ckpt, given: dict, text: str, n: int, where: str):
    """``ckpt.tokenize_text`` with a default ``--batch`` fitted to the text (`fit_default_batch`).

    The pre-check (`count_excerpts_before_loading`) fits the default when it can read the tokenizer;
    this covers the checkpoints it cannot (MPNet's slices, a GGUF's tokenizer): the text is tokenised
    a second time only when the default does not fit.
    """
    try:
        return ckpt.tokenize_text(text, n, args.batch, where=where)
    except UsageError:
        if "batch" in given or ckpt.tokenizer_json is None:
            raise
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(ckpt.tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    body = n - (2 if ckpt._specials() else 0)
    if body >= 1:
        fit_default_batch(args, given, len(tok.encode(text, add_special_tokens=False).ids) // body, n)
    return ckpt.tokenize_text(text, n, args.batch, where=where)  # refused as before if still short


def count_excerpts_before_loading(args, given: dict) -> None:
    """Refuse a ``--text`` run whose text has fewer than ``--batch`` excerpts, before the weights load
    (a default ``--batch`` is lowered to what the text gives instead: `fit_default_batch`).

    Reads only ``config.json`` and ``tokenizer.json``, or a GGUF file's metadata (no weights, no JAX),
    so a too-short text is refused in a second instead of after the model loads (35 s for SmolLM2).
    It applies the rule of
    `rankdyn._trained._text.excerpts` (BERT excerpts hold ``n - 2`` text tokens between
    ``[CLS]`` and ``[SEP]``) and says nothing when it cannot tell: a missing or unreadable file,
    another architecture or an ``--n`` out of range are left to the full check after loading.

    Raises:
        UsageError: the text has fewer than ``--batch`` excerpts (the message of the full check).
    """
    import json
    import zipfile

    if args.text is None or args.input_ids is not None or args.batch < 1:
        return
    from .._trained._installed import resolve_checkpoint

    try:
        path, files = resolve_checkpoint(args.checkpoint), {}
    except UsageError:
        return  # refused, with its message, when the checkpoint loads
    try:
        if path.suffix == ".gguf" and path.is_file():
            files = _gguf_files(path)
        elif path.is_dir():
            files = {
                k: (path / k).read_bytes() for k in ("config.json", "tokenizer.json") if (path / k).is_file()
            }
        elif path.is_file():
            with zipfile.ZipFile(path) as z:
                for want in ("config.json", "tokenizer.json"):  # the shallowest match, as the reader does
                    hits = sorted(
                        (m for m in z.namelist() if m.split("/")[-1] == want), key=lambda m: m.count("/")
                    )
                    files |= {want: z.read(hits[0])} if hits else {}
        config = json.loads(files["config.json"])
        text = args.text.read_bytes().decode("utf-8", errors="replace")
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):  # a UsageError too: refused when loaded
        return
    arch = config.get("model_type") if isinstance(config, dict) else None
    positions = config.get("max_position_embeddings", config.get("n_positions")) if arch else None
    n = args.n if "n" in given else DEFAULT_N
    if (
        arch not in ("bert", "gpt2", "llama")
        or "tokenizer.json" not in files
        or not 1 <= n <= (positions or 0)
    ):
        return
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(files["tokenizer.json"].decode("utf-8", errors="replace"))
    tok.no_truncation()
    tok.no_padding()
    count = len(tok.encode(text, add_special_tokens=False).ids)
    body = n - (2 if arch == "bert" else 0)
    if body >= 1:
        fit_default_batch(args, given, count // body, n)
    if body >= 1 and count // body < args.batch:
        what = "not even one excerpt" if count < body else f"only {count // body} excerpts"
        raise UsageError(
            f"--text {args.text}: the text has {count} tokens: {what} of {body} text tokens (n={n}), but "
            f"batch={args.batch} were asked for; give a longer text or a smaller batch or n."
        )


def _gguf_files(path: Path) -> dict:
    """A GGUF file's metadata as the files `_count_excerpts_before_loading` reads: a config (model type,
    positions) and the tokenizer rebuilt from it (none if it cannot be: refused after loading)."""
    import json

    from .._trained._gguf import gguf_tokenizer, open_gguf

    where = f"checkpoint {path}"
    reader = open_gguf(path, where)
    config = {"model_type": "llama", "max_position_embeddings": reader.fields.get("llama.context_length")}
    tokenizer = gguf_tokenizer(reader, where)[0]
    return {"config.json": json.dumps(config).encode()} | (
        {"tokenizer.json": tokenizer.encode()} if tokenizer else {}
    )
